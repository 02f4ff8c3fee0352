#!/usr/bin/env python3
"""Is a short kernel's per-process time level set on the host (launch) or on the GPU? (issue 3)

    python3 scripts/gpu/launch_bound.py --problems .data/kernelsseum-v0/problems --out $OUT/launch.json \
        [--ids 1,3,4,5,12] [--procs 6]

Session 7 showed that the placements of a problem's inputs inside one process agree (median spread
<1%), while two processes (two runs) sit on levels 10-30% apart for sub-3 ms eager and torch.compile
baselines. This script starts ``--procs`` fresh processes, one after the other; each loads the
level-1 problems ``--ids`` and times ``Model(*inputs)`` on the GPU four ways, interleaved:

- ``single``: the kbench timer (an L2 flush, then one call between a CUDA event pair; 100 ms of
  warm-up, at least 0.25 s of trials), as every baseline and candidate is timed;
- ``single_noflush``: the same without the L2 flush;
- ``hidden``: ``single`` with launch hiding (``TimerSettings.hide_launch``: a GPU spin before the start
  event, so the call's kernels are queued when it fires);
- ``b2b``: 20 calls back to back between one event pair, per call (the GPU queue stays full, so the
  host's launch time is hidden when it is shorter than the kernels);
- ``host``: the host's time for one call without synchronising (launch cost), median of 200.

Each process records the CPU it ran on. If ``single`` moves between processes and ``b2b`` does not, the
levels come from the host side (launch latency inside the timed region), not from the GPU's memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing_drift import load_eager  # noqa: E402  (one copy of the problem loading)


def child(problems: Path, ids: list[int], rounds: int) -> dict:
    import torch

    from kernelbench_harness.execution import timing as T

    dev = torch.device("cuda:0")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    flush = T.l2_flush_bytes_for(dev, "device", 256 * 1024 * 1024)
    single = T.TimerSettings(timer="cuda_events", warmup=5, trials=20, adaptive=True, max_trials=2000,
                             target_ci_rel=0.01, time_budget_s=4.0, warmup_ms=100.0, min_time_s=0.25,
                             l2_flush_bytes=flush)
    noflush = dataclasses.replace(single, l2_flush_bytes=0)
    hidden = dataclasses.replace(single, hide_launch=True)
    out: dict = {"cpu_start": _cpu(), "affinity": sorted(os.sched_getaffinity(0)), "problems": {}}
    for pid in ids:
        _path, _mod, model, sets, fn = load_eager(problems, pid, dev)

        rows: dict[str, list[float]] = {"single": [], "single_noflush": [], "hidden": [], "b2b": [], "host": []}
        exposed = []
        for _ in range(rounds):
            time.sleep(0.2)
            rows["single"].append(T.time_callable(fn, dev, single)[0].median_ms)
            rows["single_noflush"].append(T.time_callable(fn, dev, noflush)[0].median_ms)
            st, inf = T.time_callable(fn, dev, hidden)
            rows["hidden"].append(st.median_ms)
            exposed.append([inf.get("launch_exposed"), inf.get("launch_hidden_trials"), inf.get("launch_sleep_ms")])
            per = []
            for r in range(15):
                torch.cuda.synchronize(dev)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for i in range(20):
                    fn(i)
                b.record()
                torch.cuda.synchronize(dev)
                per.append(a.elapsed_time(b) / 20)
            rows["b2b"].append(statistics.median(per))
            hs = []
            for i in range(200):
                torch.cuda.synchronize(dev)
                h0 = time.perf_counter_ns()
                fn(i)
                hs.append((time.perf_counter_ns() - h0) / 1e6)
            torch.cuda.synchronize(dev)
            rows["host"].append(statistics.median(hs))
        out["problems"][str(pid)] = {k: [round(v, 6) for v in vs] for k, vs in rows.items()}
        out["problems"][str(pid)]["hidden_exposed_trials_sleep_ms"] = exposed
        del model, sets
        torch.cuda.empty_cache()
    out["cpu_end"] = _cpu()
    return out


def _cpu() -> int:
    try:
        return os.sched_getcpu() if hasattr(os, "sched_getcpu") else -1
    except OSError:
        return -1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ids", default="1,3,4,5,12")
    ap.add_argument("--procs", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    ids = [int(x) for x in a.ids.split(",") if x]
    if a.child:
        print(json.dumps(child(a.problems, ids, a.rounds)))
        return 0
    procs = []
    for k in range(a.procs):
        p = subprocess.run([sys.executable, __file__, "--child", "--problems", str(a.problems), "--out", str(a.out),
                            "--ids", a.ids, "--rounds", str(a.rounds)], capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stderr[-3000:], file=sys.stderr)
            return 1
        procs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(f"process {k} done", flush=True)
    summary: dict = {}
    for pid in (str(i) for i in ids):
        for way in ("single", "single_noflush", "hidden", "b2b", "host"):
            per_proc = [statistics.median(pr["problems"][pid][way]) for pr in procs]
            summary[f"L1/{pid} {way}"] = {
                "median_ms": round(statistics.median(per_proc), 5),
                "between_process_spread": round((max(per_proc) - min(per_proc)) / statistics.median(per_proc), 4),
                "per_process_ms": [round(x, 5) for x in per_proc],
            }
    a.out.write_text(json.dumps({"summary": summary, "processes": procs}, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
