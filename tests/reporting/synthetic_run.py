"""A synthetic results store for report, export, leaderboard and browser tests.

Two runs in one SQLite store:

- ``synth-a`` (protocol kbench, fp32, "NVIDIA H200"): models ``alpha`` and ``beta``; level 1 has
  four problems, level 2 three (L2/3 flagged degenerate). Outcomes cover correct (one at 12x, marked
  for review), incorrect, cheat with a finding, timing_invalid, compile_error, a two-turn sample with
  a transcript, and a missing problem.
- ``synth-b`` (protocol cuda-agent, "NVIDIA H100"): model ``gamma``, three level-1 problems.
"""

from __future__ import annotations

from pathlib import Path

from kernelbench_harness.core import (
    Backend,
    Candidate,
    EvalResult,
    Finding,
    Outcome,
    Problem,
    Severity,
    TimingStats,
)
from kernelbench_harness.protocols import get_protocol
from kernelbench_harness.store import Store

H200 = {
    "device_type": "cuda",
    "device_name": "NVIDIA H200",
    "device_count": 1,
    "torch": "2.13.0",
    "cuda": "13.0",
    "triton": "3.9.0",
    "driver": "580.1",
    "hardware_fingerprint": "hw-h200-0001",
    "software_fingerprint": "sw-0001",
}
H100 = {
    "device_type": "cuda",
    "device_name": "NVIDIA H100 80GB HBM3",
    "hardware_fingerprint": "hw-h100-0001",
    "software_fingerprint": "sw-0002",
}

CANDIDATE_SRC = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;   // <script>alert(1)</script> must stay text
}
"""

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


def _problem(level: int, pid: int, name: str) -> Problem:
    code = (
        f"import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        f"        return torch.relu(x)  # L{level}/{pid}\n\ndef get_inputs():\n    return [torch.rand(16)]\n\n"
        f"def get_init_inputs():\n    return []\n"
    )
    return Problem(level, pid, name, code, source=f"synthetic/level{level}/{pid}_{name}.py")


def _stats(ms: float, n: int = 20) -> TimingStats:
    samples = tuple(ms * (1 + 0.01 * ((i % 5) - 2)) for i in range(n))
    return TimingStats(
        median_ms=ms,
        mean_ms=ms,
        std_ms=ms * 0.01,
        min_ms=min(samples),
        max_ms=max(samples),
        ci95_low_ms=ms * 0.995,
        ci95_high_ms=ms * 1.005,
        n=n,
        samples_ms=samples,
        timer="cuda_events",
        statistic="median",
    )


def _correct(cand_ms: float, eager: float, comp: float) -> EvalResult:
    return EvalResult(
        Outcome.CORRECT,
        compiled=True,
        correct=True,
        max_abs_err=1e-6,
        max_rel_err=2e-6,
        candidate=_stats(cand_ms),
        eager_ms=eager,
        compile_ms=comp,
        device="cuda:0",
        phase_s={"build": 3.2, "verify": 0.4},
    )


PROBLEMS_A = [
    _problem(1, 1, "ReLU"),
    _problem(1, 2, "Matmul"),
    _problem(1, 3, "Softmax"),
    _problem(1, 4, "GELU"),
    _problem(2, 1, "Conv_ReLU"),
    _problem(2, 2, "Gemm_Add"),
    _problem(2, 3, "Min_Clamp_Zero"),
]
PROBLEMS_B = [_problem(1, 1, "ReLU"), _problem(1, 2, "Matmul"), _problem(1, 3, "Softmax")]


def record(
    store: Store,
    run: str,
    p: Problem,
    model: str,
    result: EvalResult,
    *,
    sample: int = 0,
    turn: int = 0,
    code: str = CANDIDATE_SRC,
    messages: list[dict] | None = None,
    reply: str | None = None,
    tokens: tuple[int, int] | None = None,
) -> int:
    cand = Candidate(p.level, p.problem_id, code, Backend.detect(code), sample, turn, model) if code else None
    gen = None
    if tokens:
        gen = {
            "text": reply or "",
            "code": code,
            "model": model,
            "input_tokens": tokens[0],
            "output_tokens": tokens[1],
            "latency_s": 12.5,
            "cost_usd": 0.0123,
        }
    return store.record_attempt(
        run,
        problem=p,
        candidate=cand,
        model=model,
        sample_id=sample,
        turn=turn,
        messages=messages,
        reply=reply,
        generation=gen,
        result=result,
    )


def build_store(path: Path) -> Store:
    """Create (or open) the synthetic store at ``path`` (an SQLite file)."""
    store = Store(f"sqlite:///{path}")
    if store.get_run("synth-a") is not None:
        return store
    proto = get_protocol("kbench").to_dict()
    store.create_run(
        "synth-a",
        model="alpha",
        protocol=proto,
        config={"samples": 1, "turns": 2},
        hardware=H200,
        problems=PROBLEMS_A,
    )
    a = PROBLEMS_A
    msgs = [
        {"role": "system", "content": "You write CUDA kernels."},
        {"role": "user", "content": "Write ModelNew for <problem> & make it fast."},
    ]
    # alpha
    record(
        store,
        "synth-a",
        a[0],
        "alpha",
        _correct(0.5, 1.0, 0.8),
        messages=msgs,
        reply="```python\n...\n```",
        tokens=(1200, 800),
    )
    record(
        store,
        "synth-a",
        a[1],
        "alpha",
        EvalResult(
            Outcome.INCORRECT,
            compiled=True,
            max_abs_err=1.4e-3,
            max_rel_err=float("nan"),
            error="max abs error 1.4e-3",
        ),
        messages=msgs,
        reply="first try",
        tokens=(1000, 600),
    )
    record(
        store,
        "synth-a",
        a[1],
        "alpha",
        _correct(2.0, 2.1, 1.9).with_(extra={"integrity_checks": {
            "kernel_ablation": "not judged: out of device memory", "timed_output": "judged"}}),
        turn=1,
        messages=msgs + [{"role": "user", "content": "incorrect: max abs error 1.4e-3"}],
        reply="fixed",
        tokens=(1500, 700),
    )
    record(
        store,
        "synth-a",
        a[2],
        "alpha",
        EvalResult(
            Outcome.CHEAT,
            tag="input-mutation",
            compiled=True,
            correct=True,
            candidate=_stats(0.01),
            eager_ms=1.0,
            compile_ms=1.0,
            findings=(
                Finding(
                    "runtime.input-mutation",
                    Severity.CHEAT,
                    "input-mutation",
                    "forward wrote into its input x",
                    {"arg": 0},
                ),
            ),
        ),
    )
    record(store, "synth-a", a[4], "alpha", _correct(0.1, 1.2, 1.0))  # 12x: marked for review
    record(
        store, "synth-a", a[5], "alpha", EvalResult(Outcome.COMPILE_ERROR, error="nvcc: error: expected ';'")
    )
    record(store, "synth-a", a[6], "alpha", _correct(0.9, 1.0, 1.0))  # degenerate problem: scored apart
    # beta
    record(
        store,
        "synth-a",
        a[0],
        "beta",
        EvalResult(
            Outcome.TIMING_INVALID,
            tag="side-stream",
            compiled=True,
            correct=True,
            candidate=_stats(0.2),
            eager_ms=1.0,
            compile_ms=0.8,
            findings=(
                Finding(
                    "timing.side-stream", Severity.TIMING, "side-stream", "work launched on a side stream"
                ),
            ),
        ),
    )
    record(store, "synth-a", a[1], "beta", _correct(1.5, 2.1, 1.9))
    record(store, "synth-a", a[3], "beta", _correct(0.4, 0.6, 0.5))
    record(
        store,
        "synth-a",
        a[4],
        "beta",
        EvalResult(Outcome.RUNTIME_ERROR, compiled=True, error="CUDA error: an illegal memory access"),
    )
    store.set_problem_flags("synth-a", {"L2/3": ["degenerate"]})
    store.set_run_status("synth-a", "finished")

    store.create_run(
        "synth-b",
        model="gamma",
        protocol=get_protocol("cuda-agent").to_dict(),
        config={},
        hardware=H100,
        problems=PROBLEMS_B,
    )
    record(store, "synth-b", PROBLEMS_B[0], "gamma", _correct(0.5, 1.0, 0.9))
    record(store, "synth-b", PROBLEMS_B[1], "gamma", _correct(3.0, 2.0, 2.0))
    record(
        store, "synth-b", PROBLEMS_B[2], "gamma", EvalResult(Outcome.TIMEOUT, error="timed out after 180 s")
    )
    store.set_run_status("synth-b", "interrupted")
    return store
