"""Shared pieces for the evaluator tests: tiny problems written here, a fast protocol, stand-in
baselines, and one call that evaluates a candidate source on the CPU.

The problems are our own and deliberately small, so that a candidate process (forked from the
evaluator's zygote, Triton under ``TRITON_INTERPRET=1``) finishes in well under a second.
"""

from __future__ import annotations

from pathlib import Path

from kernelbench_harness.core import Backend, Candidate, EvalResult, Problem, TimingStats
from kernelbench_harness.execution.device import DeviceEvaluator, EvalJob
from kernelbench_harness.protocols import Protocol, get_protocol

__all__ = [
    "AFFINE",
    "CANDIDATES",
    "FAST_KBENCH",
    "FAST_KERNELBENCH",
    "STAND_IN_BASELINES",
    "WIDE_SOFTMAX",
    "checks",
    "describe",
    "evaluate",
    "make_evaluator",
]

CANDIDATES = Path(__file__).resolve().parents[1] / "exploits" / "candidates"

# y = alpha * x + 1 (alpha = 2.0): exact in fp32 up to one rounding, so an honest fp32 kernel matches
# PyTorch bit for bit and any lower-precision arithmetic shows.
_AFFINE_CODE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return x * self.alpha + 1.0


def get_inputs():
    return [torch.randn(8, 256)]


def get_init_inputs():
    return [2.0]
'''

# Softmax over 32768 non-negative values: every output is below 1e-4, so an all-zero answer passes
# allclose at atol=1e-4 (EXPLOITS K-02) but not kbench's float64-bound judge.
_WIDE_SOFTMAX_CODE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.rand(4, 32768)]


def get_init_inputs():
    return []
'''

AFFINE = Problem(1, 901, "Affine_test", _AFFINE_CODE, "tests/execution/evalkit.py")
WIDE_SOFTMAX = Problem(1, 902, "WideSoftmax_test", _WIDE_SOFTMAX_CODE, "tests/execution/evalkit.py")

# Short timing: verdicts, not times, are under test.
FAST_KBENCH: Protocol = get_protocol("kbench", warmup=1, trials=5, max_trials=12, time_budget_s=0.2)
FAST_KERNELBENCH: Protocol = get_protocol("kernelbench", warmup=1, trials=4, max_trials=4)

_ONE_MS = TimingStats(1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1, (1.0,), "wall", "median")
# Known baseline times, so the evaluator never times eager / torch.compile on this slow CPU.
STAND_IN_BASELINES = {"eager": _ONE_MS, "compile:default": _ONE_MS}


def make_evaluator(scratch: Path, *, memory_limit_bytes: int = 3 << 29,
                   build_cache: Path | None = None) -> DeviceEvaluator:
    """A CPU evaluator whose scratch folder is ``scratch`` (1.5 GiB resident limit by default)."""
    return DeviceEvaluator("cpu", scratch_dir=scratch, memory_limit_bytes=memory_limit_bytes,
                           build_cache=build_cache)


def evaluate(ev: DeviceEvaluator, source: str, problem: Problem = AFFINE, *, protocol: Protocol = FAST_KBENCH,
             timeout_s: float = 20.0, build_timeout_s: float = 60.0, run_seed: int = 7) -> EvalResult:
    """Evaluate candidate ``source`` for ``problem`` (source text, or a file name under ``CANDIDATES``)."""
    if source.endswith(".py") and "\n" not in source:
        source = (CANDIDATES / source).read_text(encoding="utf-8")
    cand = Candidate(problem.level, problem.problem_id, source, Backend.detect(source))
    return ev.evaluate(EvalJob(problem, cand, protocol, run_seed=run_seed, baselines=dict(STAND_IN_BASELINES),
                               timeout_s=timeout_s, build_timeout_s=build_timeout_s))


def checks(res: EvalResult, *, severity: str | None = None) -> set[str]:
    """Names of the checks that fired (optionally only those of one severity)."""
    return {f.check for f in res.findings if severity is None or str(f.severity) == severity}


def describe(res: EvalResult) -> str:
    """One-line verdict plus findings, for assertion messages."""
    fs = "; ".join(f"{f.check}[{f.severity}]: {f.message[:90]}" for f in res.findings)
    return f"{res.outcome}({res.tag}) error={res.error[:300]!r} findings: {fs} log={res.log[-600:]!r}"

