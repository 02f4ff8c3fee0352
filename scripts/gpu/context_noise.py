#!/usr/bin/env python3
"""Does another process making a CUDA context on the device disturb a timing window? (issue 7)

    python3 scripts/gpu/context_noise.py --out $OUT/context_noise.json [--rounds 6] [--procs 2]

A candidate's process start (its CUDA context made, the shared buffers mapped: about 0.6 s a job in H200 session
19) still holds the device's host lock shared, so a window queued meanwhile waits for it. Letting windows in during
the start is only right if a context being made in another process does not move the window's timing. This script
times three workloads with kbench's timer (the ``kbench`` protocol's settings on this device) in blocks under three
conditions, the conditions' order rotated each round:

- ``quiet``: nothing else runs;
- ``host``: ``--procs`` processes, each with torch imported, fork children that make a host tensor, live on
  for ``--host-pace-s`` and exit, without touching the GPU: the host-side cost of process starts alone, at about
  the rate of the ``context`` children;
- ``context``: the children also make a CUDA context on the device and allocate one block, as a candidate's
  process (forked from kbench's zygote) does before its first command.

A block counts only where children ended while it was timed (``children`` in each block).

Per workload and condition it prints the median over rounds of (block median / the round's quiet median - 1); the
``context`` figure beside the ``host`` one is the effect of the contexts themselves. Nothing of kbench's
evaluation runs here: only its timer (``kernelbench_harness.execution.timing``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

#: a churner: imports torch once (no CUDA), says "ready", then forks children until its stdin closes, as
#: kbench's zygote starts candidate processes; each child (``context``) makes a CUDA context on the device and
#: one block, or (``host``) only makes a host tensor, then lives on until ``pace`` seconds after its fork (so the
#: two kinds start and end processes at about the same rate), and exits 0; a child that failed exits 1 and is not
#: counted. At the end the churner prints the end times (epoch s) of its children that succeeded, as JSON: the
#: timing process is not woken while it times.
CHURNER = """
import json, os, select, sys, time, torch
kind, dev, pace = sys.argv[1], sys.argv[2], float(sys.argv[3])
print("ready", flush=True)
ends = []
while not select.select([sys.stdin], [], [], 0)[0]:
    t0 = time.time()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if kind == "context":
                torch.cuda.init(); x = torch.empty(1 << 20, device=dev); torch.cuda.synchronize()
            else:
                x = torch.empty(1 << 20)
                time.sleep(max(0.0, pace - (time.time() - t0)))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        ends.append(time.time())
print(json.dumps(ends), flush=True)
"""


class Churn:
    """``procs`` churner processes (:data:`CHURNER`) of ``kind`` (``host`` or ``context``) starting and ending
    children until stopped; after it, ``ends`` holds the end times of the children that succeeded, and
    :meth:`ended_between` counts them in a block. Session 20's first version started each child as a new
    interpreter importing torch, and none ended while any block was timed (its blocks' ``children`` were all
    0; each block took about 1-2 s): its figures show nothing about contexts."""

    START_TIMEOUT_S = 120.0

    def __init__(self, kind: str, procs: int, device: str, pace_s: float) -> None:
        self.kind, self.ends = kind, []
        self._procs = [subprocess.Popen([sys.executable, "-c", CHURNER, kind, device, str(pace_s)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                       for _ in range(procs)]

    def __enter__(self) -> "Churn":
        for p in self._procs:  # each churner has imported torch before the blocks begin
            assert p.stdout is not None
            ready, _, _ = select.select([p.stdout], [], [], self.START_TIMEOUT_S)
            if not ready or p.stdout.readline().strip() != "ready":
                self._kill()
                raise RuntimeError(f"a {self.kind} churner did not start within {self.START_TIMEOUT_S:.0f} s")
        time.sleep(1.0)  # children are starting and ending by now
        return self

    def _kill(self) -> None:
        for p in self._procs:
            p.kill()
            p.wait()

    def __exit__(self, *exc: object) -> None:
        for p in self._procs:
            try:
                out, _ = p.communicate("stop\n", timeout=60)
            except subprocess.TimeoutExpired:  # a child hung (a context never made): counted as nothing
                p.kill()
                p.wait()
                continue
            try:
                self.ends.extend(json.loads(out.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                pass

    def ended_between(self, lo: float, hi: float) -> int:
        return sum(1 for t in self.ends if lo <= t <= hi)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--procs", type=int, default=2, help="children starting at a time (default 2)")
    ap.add_argument("--device", default="cuda:0", help="cuda:N; cpu only checks that the script runs")
    ap.add_argument("--host-pace-s", type=float, default=0.4,
                    help="a host child lives this long (s), about a context child's life, so both conditions "
                         "start processes at a like rate (default 0.4)")
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
            churn = Churn(cond, a.procs, str(dev), a.host_pace_s) if cond != "quiet" else None
            mine: list[dict] = []
            try:
                if churn is not None:
                    churn.__enter__()
                for name, fn in work.items():
                    t0 = time.time()
                    stats, _info = T.time_callable(fn, dev, settings)
                    mine.append({"round": r, "cond": cond, "work": name, "median_ms": stats.median_ms,
                                 "n": stats.n, "from": t0, "to": time.time(), "children": 0})
            finally:
                if churn is not None:
                    churn.__exit__()
                    # children ended while the block was timed: a churn block with none measured nothing
                    for b in mine:
                        b["children"] = churn.ended_between(b["from"], b["to"])
                blocks.extend(mine)
    summary = {}
    for name in work:
        for cond in ("host", "context"):
            rel = []
            for r in range(a.rounds):
                q = [b["median_ms"] for b in blocks if b["round"] == r and b["cond"] == "quiet" and b["work"] == name]
                c = [b["median_ms"] for b in blocks if b["round"] == r and b["cond"] == cond and b["work"] == name
                     and b["children"] > 0]
                if q and c:
                    rel.append(c[0] / q[0] - 1.0)
            kids = [b["children"] for b in blocks if b["cond"] == cond and b["work"] == name]
            if not rel:
                summary[f"{name} / {cond}"] = {"rounds": 0, "children": kids}
                print(f"{name:18s} {cond:8s} vs quiet: no block with a child ended while it was timed")
                continue
            summary[f"{name} / {cond}"] = {"median_rel": statistics.median(rel), "max_abs_rel": max(abs(x) for x in rel),
                                           "rounds": len(rel), "children": kids}
            print(f"{name:18s} {cond:8s} vs quiet: median {100 * statistics.median(rel):+.2f}%, "
                  f"max |.| {100 * max(abs(x) for x in rel):.2f}% over {len(rel)} rounds "
                  f"({min(kids)}-{max(kids)} children ended per block)")
    Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "procs": a.procs,
                                       "settings": dataclasses.asdict(settings),
                                       "blocks": blocks, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
