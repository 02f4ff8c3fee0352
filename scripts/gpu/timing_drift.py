#!/usr/bin/env python3
"""Why a short kernel's time moves between runs (issue 3): windows of the harness's own timer on the
same eager reference, with the timer settings before and after the time-based warm-up and minimum
timing time, in several fresh processes.

    python3 scripts/gpu/timing_drift.py --problems .data/kernelsseum-v0/problems --out $OUT/drift.json \
        [--ids 1,4,5,14] [--windows 5] [--procs 3] [--gap-s 0.5]

Each process loads the level-1 problems ``--ids``, and for each problem times ``Model(*inputs)`` in
``--windows`` windows per setting, the settings interleaved (old, new, old, new...), each window after
``--gap-s`` seconds with the GPU idle (as between two evaluations, while the harness reads files or
compiles). Settings:

- ``old``: the ``kbench`` protocol's timer until 2026-12-01: 5 warm-up calls, then 20 trials and on
  until the median's 95% CI is within 1% (at most 400 trials, 4 s);
- ``new``: the same plus 100 ms of time-based warm-up and at least 0.25 s of timed trials (at most
  2000 trials);
- ``placed``: ``new`` in 4 placements, the inputs moved to new memory between them (``-P placements=4``;
  choose settings with ``--settings new,placed``).

Every window records its median, trial count, warm-up calls and the GPU's SM clock, power and clock
event reasons from NVML as it began and ended. The summary (also printed) gives per problem and
setting the spread of window medians within a process and between the processes' medians: the
between-process spread is what a second run sees.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SETTINGS = {
    "old": dict(warmup=5, trials=20, adaptive=True, max_trials=400, target_ci_rel=0.01, time_budget_s=4.0,
                warmup_ms=0.0, min_time_s=0.0),
    "new": dict(warmup=5, trials=20, adaptive=True, max_trials=2000, target_ci_rel=0.01, time_budget_s=4.0,
                warmup_ms=100.0, min_time_s=0.25),
    # "new" in 4 placements, the inputs moved between them (kbench -P placements=4)
    "placed": dict(warmup=5, trials=20, adaptive=True, max_trials=2000, target_ci_rel=0.01, time_budget_s=4.0,
                   warmup_ms=100.0, min_time_s=0.25, placements=4),
}


def load_eager(problems: Path, pid: int, dev) -> tuple:
    """Level-1 problem ``pid`` of ``problems``: ``(path, module, model on dev, 3 input sets on dev, fn)``
    with ``fn(i)`` the model on set ``i mod 3`` under no_grad (weights from seed 0)."""
    import torch

    path = next((problems / "level1").glob(f"{pid}_*.py"))
    mod = types.ModuleType("p")
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).to(dev)
    sets = [[x.to(dev) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()] for _ in range(3)]

    def fn(i: int, model=model, sets=sets):
        with torch.no_grad():
            return model(*sets[i % 3])

    return path, mod, model, sets, fn


def child(problems: Path, ids: list[int], windows: int, gap_s: float, device: str, realloc: bool = False,
          settings: tuple[str, ...] = ("old", "new")) -> dict:
    import torch

    from kernelbench_harness.execution import timing as T
    from kernelbench_harness.hardware import NvmlProbe

    dev = torch.device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cuda = dev.type == "cuda"
    probe = NvmlProbe(str(getattr(torch.cuda.get_device_properties(dev), "uuid", "") or "") if cuda else "")
    flush = T.l2_flush_bytes_for(dev, "device", 256 * 1024 * 1024) if cuda else 0
    out: dict = {}
    for pid in ids:
        path, mod, model, sets, fn = load_eager(problems, pid, dev)

        rows = []
        keep: list = []  # --realloc: earlier windows' inputs and outputs stay allocated, so new ones land elsewhere
        for w in range(windows):
            if realloc and w:
                keep.append((list(sets), [fn(j) for j in range(3)], torch.empty(int(torch.randint(1, 64, (1,))) << 20,
                                                                           dtype=torch.uint8, device=dev)))
                sets[:] = [[x.to(dev) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
                           for _ in range(3)]  # in place: fn reads this list
            for name in settings:
                kw = SETTINGS[name]
                time.sleep(gap_s)
                g0 = probe.sample()
                placer = T.Placer(sets, dev) if kw.get("placements", 1) > 1 else None
                stats, info = T.time_callable(fn, dev, T.TimerSettings(timer="cuda_events" if cuda else "wall", l2_flush_bytes=flush,
                                                                         statistic="median", **kw), relocate=placer)
                if placer is not None:
                    placer.release()
                rows.append({"setting": name, "window": w, "median_ms": stats.median_ms, "n": stats.n,
                             "ci_rel": (stats.ci95_high_ms - stats.ci95_low_ms) / 2 / stats.median_ms,
                             "first5_ms": [round(x, 5) for x in stats.samples_ms[:5]],
                             "warmup_calls": info.get("warmup_calls"), "elapsed_s": round(info["elapsed_s"], 3),
                             "stopped": info["stopped"], "gpu_start": g0, "gpu_end": probe.sample(),
                             "placement_medians_ms": info.get("placement_medians_ms")})
        out[str(pid)] = {"file": path.name, "windows": rows}
        del model, sets, keep
        if cuda:
            torch.cuda.empty_cache()
    return out


def spread(xs: list[float]) -> float:
    return (max(xs) - min(xs)) / statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ids", default="1,4,5,14")
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--gap-s", type=float, default=0.5)
    ap.add_argument("--realloc", action="store_true", help="new inputs (and outputs) for every window, the earlier ones "
                    "kept allocated: does a window's time follow where its tensors sit? (timer setting new only)")
    ap.add_argument("--settings", default=None, help="comma-separated timer settings to interleave: old, new, "
                    "placed (default: old,new; with --realloc: new)")
    ap.add_argument("--device", default="cuda:0", help="cpu: a smoke test of the script (wall clock)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    ids = [int(x) for x in a.ids.split(",") if x]
    names = tuple(x for x in (a.settings or ("new" if a.realloc else "old,new")).split(",") if x)
    unknown = [x for x in names if x not in SETTINGS]
    if unknown:
        ap.error(f"unknown setting(s) {', '.join(unknown)}: use {', '.join(SETTINGS)}")
    if a.child:
        print(json.dumps(child(a.problems, ids, a.windows, a.gap_s, a.device, a.realloc, names)))
        return 0
    procs = []
    for k in range(a.procs):
        p = subprocess.run([sys.executable, __file__, "--child", "--problems", str(a.problems), "--out", str(a.out),
                            "--ids", a.ids, "--windows", str(a.windows), "--gap-s", str(a.gap_s), "--device", a.device, "--settings", ",".join(names)] + (["--realloc"] if a.realloc else []),
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stderr[-3000:], file=sys.stderr)
            return 1
        procs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(f"process {k} done", flush=True)
    summary: dict = {}
    for pid in (str(i) for i in ids):
        for name in names:
            per_proc = [[r["median_ms"] for r in pr[pid]["windows"] if r["setting"] == name] for pr in procs]
            proc_medians = [statistics.median(x) for x in per_proc]
            summary[f"L1/{pid} {name}"] = {
                "median_ms": round(statistics.median([m for x in per_proc for m in x]), 5),
                "within_process_spread": round(statistics.median(spread(x) for x in per_proc), 4),
                "between_process_spread": round(spread(proc_medians), 4),
                "first_window_over_rest": (round(statistics.median(x[0] / statistics.median(x[1:]) for x in per_proc), 4)
                                           if a.windows > 1 else None),
                "timed_s_per_window": round(statistics.median(r["elapsed_s"] for pr in procs
                                                              for r in pr[pid]["windows"] if r["setting"] == name), 3),
            }
    a.out.write_text(json.dumps({"settings": {n: SETTINGS[n] for n in names}, "summary": summary, "processes": procs}, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
