#!/usr/bin/env python3
"""Do host-bound timings move with the load on the host's other CPUs? (issue 3)

    python3 scripts/gpu/host_load.py --problems .data/kernelsseum-v0/problems --out $OUT/host_load.json \
        [--ids 3,4,5] [--procs 3] [--load 12]

Session 8 found the only timings that still moved between two runs under launch hiding were
host-bound ones (the host took longer to issue the call than the GPU took to run it): torch.compile
of kernelsseum L1/3-5 moved by up to 80% between runs, while builds and torch.compile warm-ups of
other problems ran on the rest of the machine. This script starts ``--procs`` fresh processes, one
after the other, each pinned to the last two CPUs (as kbench pins a device slot). Each compiles the
level-1 problems ``--ids`` with torch.compile (default mode) and times eager and compiled calls with
kbench's timer (launch hiding on) three times: host idle, then ``--load`` busy processes on the other
CPUs (pure Python loops, as a compiling or warming pool keeps them busy), then idle again. Per
problem and way it prints the median per condition, the host-bound share of hidden trials, and the
spread between processes of the idle medians.
"""

from __future__ import annotations

import argparse
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

BUSY = "import os,sys\nos.sched_setaffinity(0,{int(sys.argv[1])})\nwhile True: pass\n"


def child(problems: Path, ids: list[int], load: int) -> dict:
    import torch

    from kernelbench_harness.execution import timing as T

    dev = torch.device("cuda:0")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    flush = T.l2_flush_bytes_for(dev, "device", 256 * 1024 * 1024)
    hidden = T.TimerSettings(timer="cuda_events", warmup=5, trials=20, adaptive=True, max_trials=2000,
                             target_ci_rel=0.01, time_budget_s=4.0, warmup_ms=100.0, min_time_s=0.25,
                             l2_flush_bytes=flush, hide_launch=True)
    mine = sorted(os.sched_getaffinity(0))
    others = [c for c in range(os.cpu_count() or 1) if c not in mine][:load]
    fns = {}
    for pid in ids:
        _path, _mod, model, sets, fn = load_eager(problems, pid, dev)
        compiled = torch.compile(model)

        def cfn(i: int, m=compiled, sets=sets):
            with torch.no_grad():
                return m(*sets[i % 3])
        for i in range(3):
            cfn(i)  # compile outside the timed phases
        fns[f"L1/{pid} eager"] = fn
        fns[f"L1/{pid} compile"] = cfn
    torch.cuda.synchronize(dev)
    rows: dict[str, dict[str, list]] = {k: {} for k in fns}
    for cond in ("idle", "load", "idle2"):
        busy = []
        if cond == "load":
            busy = [subprocess.Popen([sys.executable, "-c", BUSY, str(c)]) for c in others]
            time.sleep(1.0)
        try:
            for name, fn in fns.items():
                st, inf = T.time_callable(fn, dev, hidden)
                hb = inf.get("launch_host_bound") or 0
                n = inf.get("launch_hidden_trials") or 0
                rows[name][cond] = [round(st.median_ms, 6), hb, n]
        finally:
            for p in busy:
                p.kill()
                p.wait()
    return {"affinity": mine, "load_cpus": others, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ids", default="3,4,5")
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--load", type=int, default=12)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    ids = [int(x) for x in a.ids.split(",") if x]
    if a.child:
        print(json.dumps(child(a.problems, ids, a.load)))
        return 0
    n = os.cpu_count() or 2
    procs = []
    for k in range(a.procs):
        p = subprocess.run(["taskset", "-c", f"{n - 2},{n - 1}", sys.executable, __file__, "--child",
                            "--problems", str(a.problems), "--out", str(a.out), "--ids", a.ids,
                            "--load", str(a.load)], capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stderr[-3000:], file=sys.stderr)
            return 1
        procs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(f"process {k} done", flush=True)
    summary: dict = {}
    for name in procs[0]["rows"]:
        s: dict = {}
        for cond in ("idle", "load", "idle2"):
            vals = [pr["rows"][name][cond] for pr in procs]
            s[cond] = {"median_ms": round(statistics.median(v[0] for v in vals), 5),
                       "per_process_ms": [v[0] for v in vals],
                       "host_bound_of_hidden": [f"{v[1]}/{v[2]}" for v in vals]}
        idle = [v for pr in procs for v in (pr["rows"][name]["idle"][0], pr["rows"][name]["idle2"][0])]
        s["idle_spread"] = round((max(idle) - min(idle)) / statistics.median(idle), 4)
        s["load_over_idle"] = round(s["load"]["median_ms"] / s["idle"]["median_ms"], 4)
        summary[name] = s
    a.out.write_text(json.dumps({"summary": summary, "processes": procs}, indent=1))
    print(json.dumps({k: {"idle_ms": v["idle"]["median_ms"], "load_ms": v["load"]["median_ms"],
                          "load_over_idle": v["load_over_idle"], "idle_spread": v["idle_spread"],
                          "hb_idle": v["idle"]["host_bound_of_hidden"], "hb_load": v["load"]["host_bound_of_hidden"]}
                      for k, v in summary.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
