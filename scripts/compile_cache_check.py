"""Does a device slot's torch.compile of a reference find what the warm-up process stored for it?

Runs the warm-up (``execution/warm.py``, a spawned process) on one small problem with a fresh inductor cache,
then, in another fresh process, the device slot's baseline compile of the same problem
(``DeviceEvaluator.measure_baselines``, mode ``compile:default``) on the CPU, and prints inductor's FX-graph
and AOTAutograd cache counters and the slot's compile seconds. A hit means the warm-up saved the slot the
compile; a miss, that the slot compiled it all again. CPU only (no GPU needed)::

    python scripts/compile_cache_check.py [--problem FILE.py]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SMALL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2.0 + 1.0


def get_inputs():
    return [torch.rand(16, 32)]


def get_init_inputs():
    return []
'''


def _problem(path: str | None):
    from kernelbench_harness.core import Problem

    if path:
        p = Path(path)
        return Problem(1, 1, p.stem, p.read_text(), p.name)
    return Problem(1, 1, "Lin", SMALL, "1_Lin.py")


def phase(which: str, problem_path: str | None) -> dict:
    """``warm``: the warm-up's record; ``slot``: the slot's cache counters and compile seconds. Runs in a process
    whose ``TORCHINDUCTOR_CACHE_DIR`` the caller set."""
    from kernelbench_harness.protocols import get_protocol

    p = _problem(problem_path)
    proto = get_protocol("kbench", warmup=0, trials=1, max_trials=1, adaptive=False)
    if which == "warm":
        from kernelbench_harness.execution.warm import warm_compile

        import inspect

        # (kbench before the fix took no tf32: run as it was, to compare)
        extra = {"tf32": proto.tf32} if "tf32" in inspect.signature(warm_compile).parameters else {}
        res = warm_compile([p], precision="fp32", modes=["default"], no_grad=proto.reference_no_grad,
                           device_index=None, workers=1, **extra)
        return {"warm_compile_s": res[p.key].get("default"), "warm": res[p.key]}
    from torch._dynamo.utils import counters

    from kernelbench_harness.execution.device import DeviceEvaluator

    ev = DeviceEvaluator("cpu", scratch_dir=Path(tempfile.mkdtemp(prefix="kbcc-")), memory_limit_bytes=3 << 29)
    try:
        ev.measure_baselines(p, proto, 0, ["compile:default"])
        info = ev.last_baseline_info.get("compile:default") or {}
    finally:
        ev.close()
    return {"fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
            "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
            "aot_autograd": dict(counters["aot_autograd"]), "slot_compile_s": info.get("compile_s"),
            "error": info.get("error")}


def check(problem_path: str | None = None, cache_dir: str | None = None) -> dict:
    """Both phases, each in a fresh interpreter sharing one new inductor cache folder; their results merged."""
    cache = cache_dir or tempfile.mkdtemp(prefix="kbcc-inductor-")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    out: dict = {}
    for which in ("warm", "slot"):
        cmd = [sys.executable, __file__, "--phase", which] + (["--problem", problem_path] if problem_path else [])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not lines:
            raise RuntimeError(f"{which} phase failed (exit {r.returncode}):\n{r.stderr[-4000:]}")
        out.update(json.loads(lines[-1]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default=None, help="a KernelBench problem file (default: a small Linear)")
    ap.add_argument("--phase", choices=["warm", "slot"], default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.problem and not Path(a.problem).is_file():
        ap.error(f"no such problem file: {a.problem} (a KernelBench problem, e.g. level3/16_DenseNet201.py)")
    if a.phase:
        print(json.dumps(phase(a.phase, a.problem)), flush=True)
        return 0
    print(json.dumps(check(a.problem), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
