#!/usr/bin/env python3
"""Does another process making a CUDA context on the device disturb a timing window? (issue 7)

    python3 scripts/gpu/context_noise.py --out $OUT/context_noise.json [--rounds 6] [--procs 2]

A candidate's process start (its CUDA context made, the shared buffers mapped: about 0.6 s a job in H200 session
19) still holds the device's host lock shared, so a window queued meanwhile waits for it. Letting windows in during
the start is only right if a context being made in another process does not move the window's timing. This script
times three workloads with kbench's timer (the ``kbench`` protocol's settings on this device) in blocks under three
conditions, the conditions' order rotated each round:

- ``quiet``: nothing else runs;
- ``host``: ``--procs`` processes at a time start, import torch and exit, without touching the GPU
  (``CUDA_VISIBLE_DEVICES=``): the host-side cost of process starts alone;
- ``context``: the same processes also make a CUDA context on the device and allocate one block, as a candidate's
  process does before its first command.

Per workload and condition it prints the median over rounds of (block median / the round's quiet median - 1); the
``context`` figure beside the ``host`` one is the effect of the contexts themselves. Nothing of kbench's
evaluation runs here: only its timer (``kernelbench_harness.execution.timing``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CHILD = ("import torch, sys\n"
         "if sys.argv[1] == 'context':\n"
         "    torch.cuda.init(); x = torch.empty(1 << 20, device='cuda:0'); torch.cuda.synchronize()\n")


class Churn:
    """Keeps ``procs`` child processes of ``kind`` (``host`` or ``context``) starting and ending until stopped."""

    def __init__(self, kind: str, procs: int) -> None:
        self.kind, self.procs, self.started = kind, procs, 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(procs)]

    def _loop(self) -> None:
        env = dict(os.environ)
        if self.kind == "host":
            env["CUDA_VISIBLE_DEVICES"] = ""
        while not self._stop.is_set():
            subprocess.run([sys.executable, "-c", CHILD, self.kind], env=env, check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.started += 1

    def __enter__(self) -> "Churn":
        for t in self._threads:
            t.start()
        time.sleep(1.0)  # the first children are importing by now
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--procs", type=int, default=2, help="children starting at a time (default 2)")
    ap.add_argument("--device", default="cuda:0", help="cuda:N; cpu only checks that the script runs")
    a = ap.parse_args()
    if a.rounds < 1 or a.procs < 1:
        ap.error("--rounds and --procs must be at least 1")

    import torch

    from kernelbench_harness.execution import timing as T
    from kernelbench_harness.protocols import get_protocol

    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("context_noise.py: no CUDA device here (--device cpu only checks that the script runs)", file=sys.stderr)
        return 2
    if dev.type == "cpu":
        print("--device cpu: a smoke test of the script, not a measurement", file=sys.stderr)
    settings = T.TimerSettings.from_protocol(get_protocol("kbench"), dev)
    scale = 1 if dev.type == "cuda" else 16  # smaller on a CPU: a smoke test
    small = torch.randn((1 << 20) // scale, device=dev)
    mat = torch.randn(4096 // scale, 4096 // scale, device=dev)
    big = torch.empty((64 << 20) // scale, device=dev)
    src = torch.randn((64 << 20) // scale, device=dev)
    work = {
        "elementwise 4 MiB": lambda i: small * 2.0 + 1.0,
        "matmul 4096": lambda i: mat @ mat,
        "copy 256 MiB": lambda i: big.copy_(src),
    }
    conds = ["quiet", "host", "context"]
    blocks: list[dict] = []
    for r in range(a.rounds):
        for cond in conds[r % 3:] + conds[:r % 3]:
            churn = Churn(cond, a.procs) if cond != "quiet" else None
            try:
                if churn is not None:
                    churn.__enter__()
                for name, fn in work.items():
                    stats, _info = T.time_callable(fn, dev, settings)
                    blocks.append({"round": r, "cond": cond, "work": name, "median_ms": stats.median_ms,
                                   "n": stats.n, "children": churn.started if churn else 0})
            finally:
                if churn is not None:
                    churn.__exit__()
    summary = {}
    for name in work:
        for cond in ("host", "context"):
            rel = []
            for r in range(a.rounds):
                q = [b["median_ms"] for b in blocks if b["round"] == r and b["cond"] == "quiet" and b["work"] == name]
                c = [b["median_ms"] for b in blocks if b["round"] == r and b["cond"] == cond and b["work"] == name]
                if q and c:
                    rel.append(c[0] / q[0] - 1.0)
            summary[f"{name} / {cond}"] = {"median_rel": statistics.median(rel), "max_abs_rel": max(abs(x) for x in rel),
                                           "rounds": len(rel)}
            print(f"{name:18s} {cond:8s} vs quiet: median {100 * statistics.median(rel):+.2f}%, "
                  f"max |.| {100 * max(abs(x) for x in rel):.2f}% over {len(rel)} rounds")
    Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "procs": a.procs,
                                       "settings": dataclasses.asdict(settings),
                                       "blocks": blocks, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
