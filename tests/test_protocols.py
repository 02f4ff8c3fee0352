"""The three protocols' rules, pinned.

- ``kernelbench`` must follow KernelBench main's procedure (PROTOCOLS.md section 2): 5 correctness
  trials whose seeds derive from 42 and are the same for every problem and run, ``allclose`` with
  atol = rtol = 1e-4 (fp32) / 1e-2 (fp16, bf16), a shape mismatch fails, any NaN fails, dtypes are not
  checked, weights come only from reseeding 42 before each constructor, 3 warm-ups, 100 timed trials
  plus 1 discarded, the mean rounded to 3 significant figures, reference under ``no_grad`` and the
  candidate timed with autograd on. The seeds and the judge are checked against an independent
  encoding of those rules written here, not against the harness's own helpers.
- ``cuda-agent`` must follow CUDA Agent's (section 3): 5 fresh inputs, ``load_state_dict`` weights,
  atol = rtol = 1e-2, ``torch.nn.functional`` forbidden in ``ModelNew.forward``, profiler timing over
  10 iterations after 5 warm-ups, no L2 flush, the same input every iteration.
- ``kbench`` (the default) is stricter: secret seeds per run and problem, several fresh input sets,
  a float64-bound judge (honest fp32 summation orders pass, lower precision and small real errors
  fail), integer inputs kept, weights carried by ``state_dict``, tolerance per dtype, NaN where the
  reference has NaN.
- A run stores its protocol and reports never put two protocols in one table.

Judges are exercised directly on a :class:`ProblemContext` (the trusted side's own comparison);
what needs the candidate process (weights, dtypes of inputs, grad mode, the functional ban) goes
through :class:`DeviceEvaluator` on the CPU with Triton kernels under its interpreter.

Tests marked ``xfail(strict=True)`` pin defects found in the evaluator; each reason says what is wrong.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from kernelbench_harness.core import Backend, Candidate, EvalResult, Outcome, Problem, TimingStats
from kernelbench_harness.errors import KbenchError
from kernelbench_harness.execution import timing
from kernelbench_harness.execution.device import DeviceEvaluator, EvalJob, ProblemContext, ReferenceError_
from kernelbench_harness.protocols import Protocol, get_protocol

CPU = torch.device("cpu")
MIB = 1024 * 1024

# -- problems (our own, tiny) -------------------------------------------------------------------

_HEAD = "import torch\nimport torch.nn as nn\n\n"

AFFINE = Problem(1, 1, "Affine", _HEAD + '''
class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return x * self.alpha + 0.25


def get_inputs():
    return [torch.rand(16, 64)]


def get_init_inputs():
    return [1.5]
''')

SCALED = Problem(1, 2, "Learned_scale", _HEAD + '''
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * self.w


def get_inputs():
    return [torch.rand(8, 64)]


def get_init_inputs():
    return [64]
''')

MATMUL = Problem(1, 3, "Matmul_long_K", _HEAD + '''
class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(32, 1024), torch.randn(1024, 32)]


def get_init_inputs():
    return []
''')

GELU = Problem(1, 4, "GELU_erf", _HEAD + '''
class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)


def get_inputs():
    return [torch.randn(64, 256) * 3]


def get_init_inputs():
    return []
''')

LOG = Problem(1, 5, "Log_with_nan", _HEAD + '''
class Model(nn.Module):
    def forward(self, x):
        return torch.log(x)


def get_inputs():
    return [torch.randn(32, 32)]


def get_init_inputs():
    return []
''')

GATHER = Problem(1, 6, "Gather_rows", _HEAD + '''
class Model(nn.Module):
    def forward(self, table, idx):
        return table[idx] * 2.0


def get_inputs():
    return [torch.rand(50, 16), torch.randint(0, 50, (40,))]


def get_init_inputs():
    return []
''')

DROPOUT = Problem(2, 7, "Linear_Dropout", _HEAD + '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


def get_inputs():
    return [torch.rand(8, 64)]


def get_init_inputs():
    return []
''')

TF32_PROBE = Problem(1, 8, "TF32_probe", _HEAD + '''
class Model(nn.Module):
    def forward(self, x):
        # doubles the output when cuDNN may use TF32 for fp32 convolutions
        return x * (2.0 if torch.backends.cudnn.allow_tf32 else 1.0)


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
''')


def kernelbench_seeds(n: int) -> list[int]:
    """KernelBench main's correctness-trial seeds, written out independently of the harness:
    ``torch.manual_seed(42)``, then ``torch.randint(0, 2**32 - 1, (1,))`` once per trial."""
    gen = torch.Generator().manual_seed(42)
    return [int(torch.randint(0, 2**32 - 1, (1,), generator=gen).item()) for _ in range(n)]


def context(problem: Problem, protocol: Protocol, tmp_path: Path, run_seed: int = 1) -> ProblemContext:
    return ProblemContext(problem, protocol, run_seed, CPU, tmp_path)


def kb_allclose_ok(out: torch.Tensor, ref: torch.Tensor, tol: float) -> bool:
    """KernelBench's verdict on one trial, written from section 2: shapes equal, no NaN, allclose."""
    return (out.shape == ref.shape and not bool(torch.isnan(out).any())
            and bool(torch.allclose(out.to(ref.dtype), ref, atol=tol, rtol=tol)))


# -- kernelbench: settings and trials ------------------------------------------------------------


def test_kernelbench_settings_are_kernelbench_mains() -> None:
    p = get_protocol("kernelbench")
    assert p.correct_trials == 5
    assert (p.seed_policy, p.fixed_seed) == ("fixed", 42)
    assert p.judge == "allclose"
    assert {k: (t.atol, t.rtol) for k, t in p.tolerances.items()} == {
        "fp32": (1e-4, 1e-4), "fp16": (1e-2, 1e-2), "bf16": (1e-2, 1e-2)}
    assert p.nan_policy == "fail" and p.check_dtype is False
    assert p.weights == "reseed"
    assert (p.timer, p.l2_flush, p.l2_flush_bytes) == ("cuda_events", "fixed", 256 * MIB)
    # ``trials`` counts the kept trials: 100, after one more timed and discarded (101 timed calls)
    assert (p.warmup, p.trials, p.discard_first, p.adaptive) == (3, 100, True, False)
    assert (p.statistic, p.round_sig) == ("mean", 3)
    assert (p.reference_no_grad, p.candidate_no_grad) == (True, False)
    assert p.rotate_inputs == 1
    for precision, tol in (("fp32", 1e-4), ("fp16", 1e-2), ("bf16", 1e-2)):
        t = get_protocol("kernelbench", precision).tolerance
        assert (t.atol, t.rtol) == (tol, tol)


def test_kernelbench_trial_seeds_are_the_same_for_every_problem_and_run(tmp_path: Path) -> None:
    want = kernelbench_seeds(5)
    p = get_protocol("kernelbench")
    for problem in (AFFINE, MATMUL):
        for run_seed in (1, 987654):
            ctx = context(problem, p, tmp_path, run_seed)
            assert ctx.n_correct == 5
            assert ctx.seeds[:5] == want
            for i, s in enumerate(want):
                torch.manual_seed(s)
                mod: dict[str, Any] = {}
                exec(problem.code, mod)  # noqa: S102 - our own problem
                expect = mod["get_inputs"]()
                assert all(torch.equal(a, b) for a, b in zip(ctx.sets_cpu[i], expect)), (problem.key, i)


def test_kernelbench_weights_come_from_reseeding_42(tmp_path: Path) -> None:
    ctx = context(SCALED, get_protocol("kernelbench"), tmp_path)
    assert ctx.weights_seed == 42
    assert ctx.job_fields()["state_dict"] is None  # nothing is carried over: reseeding is the only link
    mod: dict[str, Any] = {}
    exec(SCALED.code, mod)  # noqa: S102 - our own problem
    torch.manual_seed(42)
    expect = mod["Model"](*mod["get_init_inputs"]()).state_dict()
    assert torch.equal(ctx.cpu_state["w"], expect["w"])


def _time_kernelbench() -> tuple[TimingStats, int]:
    """Times a counting callable with the kernelbench protocol's settings; the first timed call is slow."""
    p = get_protocol("kernelbench")
    s = timing.TimerSettings.from_protocol(p, CPU)
    calls: list[int] = []

    def fn(i: int) -> None:
        calls.append(i)
        if len(calls) == 4:  # the first timed trial (after 3 warm-ups): KernelBench throws it away
            time.sleep(0.2)

    stats, _ = timing.time_callable(fn, CPU, s)
    return stats, len(calls)


def test_kernelbench_timing_warms_up_3_times_drops_the_first_trial_and_reports_the_mean_to_3_figures() -> None:
    p = get_protocol("kernelbench")
    s = timing.TimerSettings.from_protocol(p, CPU)
    assert (s.warmup, s.discard_first, s.adaptive, s.statistic, s.round_sig) == (3, True, False, "mean", 3)
    assert timing.l2_flush_bytes_for(torch.device("cuda"), p.l2_flush, p.l2_flush_bytes) == 256 * MIB
    stats, calls = _time_kernelbench()
    assert calls - stats.n - 1 == 3  # warm-ups = calls - kept - the discarded one
    assert max(stats.samples_ms) < 150.0  # the slow first trial was discarded
    assert stats.statistic == "mean"
    mean = statistics.fmean(stats.samples_ms)
    digits = 3 - 1 - math.floor(math.log10(abs(mean)))
    assert stats.value_ms == round(mean, digits)


def test_kernelbench_keeps_100_of_101_timed_trials() -> None:
    stats, calls = _time_kernelbench()
    assert stats.n == 100 and len(stats.samples_ms) == 100
    assert calls == 3 + 101


# -- kernelbench: the judge ------------------------------------------------------------------------


def test_kernelbench_judge_is_allclose_1e4_shape_first_any_nan_fails_dtype_ignored(tmp_path: Path) -> None:
    ctx = context(AFFINE, get_protocol("kernelbench"), tmp_path)
    ref = ctx.refs[0][0]
    tol = 1e-4 + 1e-4 * ref.abs()
    cases = {
        "inside": (ref + 0.5 * tol, True),
        "outside": (ref + 3.0 * tol, False),
        "shape": (ref.reshape(-1), False),
        "dtype": (ref.double(), True),
    }
    nan = ref.clone()
    nan[3, 5] = float("nan")
    cases["nan"] = (nan, False)
    for name, (out, ok) in cases.items():
        cmp = ctx.compare([out], 0)
        assert cmp.ok is ok, (name, cmp.detail)
        assert cmp.ok is kb_allclose_ok(out, ref, 1e-4), name
    assert ctx.compare([ref.reshape(-1)], 0).reason == "shape"


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_kernelbench_tolerance_is_1e2_at_half_precision(tmp_path: Path, precision: str) -> None:
    ctx = context(AFFINE, get_protocol("kernelbench", precision), tmp_path)
    ref = ctx.refs[0][0]
    assert ref.dtype == {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    tol = 1e-2 + 1e-2 * ref.float().abs()
    assert ctx.compare([(ref.float() + 0.3 * tol).to(ref.dtype)], 0).ok
    assert not ctx.compare([(ref.float() + 3.0 * tol).to(ref.dtype)], 0).ok
    # the same deviation fails at fp32
    ctx32 = context(AFFINE, get_protocol("kernelbench"), tmp_path)
    ref32 = ctx32.refs[0][0]
    assert not ctx32.compare([ref32 + 0.3 * (1e-2 + 1e-2 * ref32.abs())], 0).ok


def test_kernelbench_fails_nan_even_where_the_reference_has_nan(tmp_path: Path) -> None:
    ctx = context(LOG, get_protocol("kernelbench"), tmp_path)
    ref = ctx.refs[0][0]
    assert bool(torch.isnan(ref).any())
    assert not ctx.compare([ref.clone()], 0).ok


@pytest.mark.parametrize("name", ["kernelbench", "cuda-agent"])
def test_allclose_judge_fails_a_finite_value_where_the_reference_has_nan(tmp_path: Path, name: str) -> None:
    ctx = context(LOG, get_protocol(name), tmp_path)
    ref = ctx.refs[0][0]
    filled = ref.nan_to_num(0.0)
    assert kb_allclose_ok(filled, ref, 1e-2) is False
    assert not ctx.compare([filled], 0).ok


def test_kernelbench_casts_every_input_so_integer_indices_break_the_reference(tmp_path: Path) -> None:
    # faithful to KernelBench main (PROTOCOLS.md section 5: L1/95 breaks the same way)
    with pytest.raises(ReferenceError_):
        context(GATHER, get_protocol("kernelbench"), tmp_path)
    ctx = context(GATHER, get_protocol("kbench"), tmp_path)
    assert ctx.sets_cpu[0][1].dtype == torch.int64
    assert ctx.job_fields()["cast_int_inputs"] is False


# -- cuda-agent ----------------------------------------------------------------------------------------


def test_cuda_agent_settings_are_cuda_agents() -> None:
    p = get_protocol("cuda-agent")
    assert p.correct_trials == 5 and p.seed_policy == "secret"
    assert p.weights == "state_dict"
    assert p.judge == "allclose"
    assert all((t.atol, t.rtol) == (1e-2, 1e-2) for t in p.tolerances.values())
    assert p.forbid_functional is True
    assert (p.timer, p.warmup, p.trials, p.adaptive, p.l2_flush) == ("profiler", 5, 10, False, "none")
    assert p.rotate_inputs == 1  # the same input every timed iteration
    assert p.compile_mode == "default"


def test_cuda_agent_draws_fresh_inputs_and_judges_at_1e2(tmp_path: Path) -> None:
    p = get_protocol("cuda-agent")
    a, b = context(AFFINE, p, tmp_path, 1), context(AFFINE, p, tmp_path, 2)
    assert a.n_correct == 5
    assert set(a.seeds).isdisjoint(b.seeds)
    assert len({float(s[0].sum()) for s in a.sets_cpu[:5]}) == 5
    ref = a.refs[0][0]
    tol = 1e-2 + 1e-2 * ref.abs()
    assert a.compare([ref + 0.5 * tol], 0).ok
    assert not a.compare([ref + 3.0 * tol], 0).ok


# -- kbench: seeds, judge, dtypes, NaN ----------------------------------------------------------------


def test_kbench_seeds_are_secret_per_run_and_problem_with_several_fresh_sets(tmp_path: Path) -> None:
    p = get_protocol("kbench")
    assert p.seed_policy == "secret" and p.correct_trials >= 3
    a = context(AFFINE, p, tmp_path, 1)
    b = context(AFFINE, p, tmp_path, 2)
    c = context(SCALED, p, tmp_path, 1)
    assert len(a.seeds) == a.n_correct + 1  # one more set, never shown before timing ends
    for x, y in ((a, b), (a, c), (b, c)):
        assert set(x.seeds).isdisjoint(y.seeds)
        assert x.weights_seed != y.weights_seed
    assert not set(a.seeds) & set(kernelbench_seeds(6))
    sums = [float(s[0].sum()) for s in a.sets_cpu]
    assert len(set(sums)) == len(sums)


def _reordered_matmul(a: torch.Tensor, b: torch.Tensor, block: int = 64) -> torch.Tensor:
    """An honest fp32 product that sums the K blocks in reverse order (another summation order)."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k0 in reversed(range(0, a.shape[1], block)):
        acc += a[:, k0:k0 + block] @ b[k0:k0 + block]
    return acc


def test_kbench_fp64_bound_passes_another_summation_order_and_fails_half_precision(tmp_path: Path) -> None:
    ctx = context(MATMUL, get_protocol("kbench"), tmp_path)
    a, b = ctx.sets_cpu[0]
    ref = ctx.refs[0][0]
    honest = _reordered_matmul(a, b)
    assert not torch.equal(honest, ref)  # really another order
    cmp = ctx.compare([honest], 0)
    assert cmp.ok, cmp.detail
    assert cmp.ref_err is not None and cmp.ref_err > 0  # the bound comes from the reference's own error
    assert cmp.allclose_kernelbench is not None  # KernelBench-style verdict recorded beside
    for low in (torch.float16, torch.bfloat16):
        out = (a.to(low) @ b.to(low)).float()
        cmp = ctx.compare([out], 0)
        assert not cmp.ok, (low, cmp.detail)
        assert cmp.reason == "tolerance"


def test_tanh_gelu_fails_kbench_and_kernelbench_but_passes_cuda_agent(tmp_path: Path) -> None:
    verdicts = {}
    for name in ("kbench", "kernelbench", "cuda-agent"):
        ctx = context(GELU, get_protocol(name), tmp_path)
        x = ctx.sets_cpu[0][0]
        approx = torch.nn.functional.gelu(x, approximate="tanh")
        exact = ctx.refs[0][0].clone()
        assert ctx.compare([exact], 0).ok, name
        verdicts[name] = ctx.compare([approx], 0).ok
    assert verdicts == {"kbench": False, "kernelbench": False, "cuda-agent": True}


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_kbench_tolerance_follows_the_run_precision(tmp_path: Path, precision: str) -> None:
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    ctx = context(AFFINE, get_protocol("kbench", precision), tmp_path)
    x = ctx.sets_cpu[0][0]
    ref = ctx.refs[0][0]
    assert ref.dtype == dtype
    # the best a kernel can do at this precision: exact math on the inputs it gets, rounded once
    best = (x.to(dtype).double() * 1.5 + 0.25).to(dtype)
    assert ctx.compare([best], 0).ok
    assert not ctx.compare([(ref.float() * 1.25).to(dtype)], 0).ok
    # the recorded KernelBench-style verdict uses the precision's 1e-2
    assert get_protocol("kbench", precision).tolerance.atol == 1e-2
    # an fp32 run does not tolerate what this precision needs
    ctx32 = context(AFFINE, get_protocol("kbench"), tmp_path)
    assert not ctx32.compare([(ctx32.refs[0][0].to(dtype)).float()], 0).ok


def test_kbench_nan_must_match_the_reference(tmp_path: Path) -> None:
    ctx = context(LOG, get_protocol("kbench"), tmp_path)
    ref = ctx.refs[0][0]
    assert ctx.compare([ref.clone()], 0).ok  # NaN exactly where the reference has NaN
    assert not ctx.compare([ref.nan_to_num(0.0)], 0).ok  # a value where the reference has NaN
    extra = ref.clone()
    pos = torch.nonzero(torch.isfinite(ref))[0]
    extra[tuple(pos)] = float("nan")
    cmp = ctx.compare([extra], 0)
    assert not cmp.ok and cmp.reason == "nan"


def test_kbench_fails_zeros_on_a_dropout_problem(tmp_path: Path) -> None:
    ctx = context(DROPOUT, get_protocol("kbench"), tmp_path)
    assert "nondeterministic-reference" in ctx.flags
    assert not ctx.compare([torch.zeros_like(ctx.refs[0][0])], 0).ok


def test_kbench_reference_runs_with_tf32_off(tmp_path: Path) -> None:
    p = get_protocol("kbench")
    assert p.tf32 is False
    ctx = context(TF32_PROBE, p, tmp_path)
    assert torch.equal(ctx.refs[0][0], ctx.sets_cpu[0][0])


# -- through the candidate process ------------------------------------------------------------------

_MS = TimingStats(1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1, (1.0,), "wall", "median")
_BASELINES = {"eager": _MS, "compile:default": _MS}
# verdicts, not times, are under test: the shortest timing each protocol allows
_FAST = {"warmup": 0, "trials": 1, "max_trials": 1, "adaptive": False, "correct_trials": 2,
         "recheck_after_timing": False, "both_orders": False}


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeviceEvaluator]:
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path_factory.mktemp("kbdev"), memory_limit_bytes=3 << 29)
    yield ev
    ev.close()


def evaluate(ev: DeviceEvaluator, problem: Problem, source: str, name: str, precision: str = "fp32",
             **overrides: Any) -> EvalResult:
    proto = get_protocol(name, precision, **{**_FAST, **overrides})
    cand = Candidate(problem.level, problem.problem_id, source, Backend.detect(source))
    return ev.evaluate(EvalJob(problem, cand, proto, run_seed=11, baselines=dict(_BASELINES), timeout_s=120))


_TRITON_HEAD = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n"

_MUL_KERNEL = '''
@triton.jit
def _mul(x_ptr, w_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    w = tl.load(w_ptr + offs % cols, mask=m)
    tl.store(y_ptr + offs, x * w, mask=m)


def _launch(x, w):
    x = x.contiguous()
    y = torch.empty_like(x)
    _mul[(triton.cdiv(x.numel(), 256),)](x, w.contiguous(), y, x.numel(), w.numel(), BLOCK=256)
    return y
'''


def _scaled_candidate(init: str, extra: str = "") -> str:
    return _TRITON_HEAD + _MUL_KERNEL + f'''

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter({init})

    def forward(self, x):
        return _launch(x, self.w){extra}
'''


SAME_INIT = _scaled_candidate("torch.randn(n)")
OTHER_INIT = _scaled_candidate("torch.zeros(n)")  # right kernel, weights initialised differently


def test_weights_reseed_under_kernelbench_and_state_dict_under_kbench_and_cuda_agent(
        evaluator: DeviceEvaluator) -> None:
    got = {
        ("kernelbench", "same"): evaluate(evaluator, SCALED, SAME_INIT, "kernelbench"),
        ("kernelbench", "other"): evaluate(evaluator, SCALED, OTHER_INIT, "kernelbench"),
        ("kbench", "other"): evaluate(evaluator, SCALED, OTHER_INIT, "kbench"),
        ("cuda-agent", "other"): evaluate(evaluator, SCALED, OTHER_INIT, "cuda-agent"),
    }
    outcomes = {k: r.outcome for k, r in got.items()}
    assert outcomes == {("kernelbench", "same"): Outcome.CORRECT, ("kernelbench", "other"): Outcome.INCORRECT,
                        ("kbench", "other"): Outcome.CORRECT, ("cuda-agent", "other"): Outcome.CORRECT}, \
        {k: (r.outcome, r.error[:200]) for k, r in got.items()}
    assert got[("kbench", "other")].extra["weights"]["transferred"] == 1
    assert got[("kernelbench", "other")].extra["weights"]["transferred"] == 0


GATHER_CANDIDATE = _TRITON_HEAD + '''
@triton.jit
def _gather(t_ptr, i_ptr, y_ptr, rows, cols: tl.constexpr):
    r = tl.program_id(0)
    row = tl.load(i_ptr + r)
    c = tl.arange(0, cols)
    tl.store(y_ptr + r * cols + c, tl.load(t_ptr + row * cols + c) * 2.0)


class ModelNew(nn.Module):
    def forward(self, table, idx):
        if idx.dtype != torch.int64:
            raise TypeError(f"indices arrived as {idx.dtype}")
        y = torch.empty(idx.numel(), table.shape[1], dtype=table.dtype)
        _gather[(idx.numel(),)](table.contiguous(), idx, y, idx.numel(), cols=table.shape[1])
        return y
'''


def test_kbench_keeps_integer_inputs_integer(evaluator: DeviceEvaluator) -> None:
    r = evaluate(evaluator, GATHER, GATHER_CANDIDATE, "kbench")
    assert r.outcome is Outcome.CORRECT, (r.outcome, r.error[:500])


BLOCKED_MATMUL = _TRITON_HEAD + '''
@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


class ModelNew(nn.Module):
    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty(M, N, dtype=a.dtype)
        _mm[(M // 16, N // 16)](a.contiguous(), b.contiguous(), c, M, N, K, BM=16, BN=16, BK=128)
        return c
'''


def test_kbench_passes_an_honest_blocked_triton_matmul(evaluator: DeviceEvaluator) -> None:
    r = evaluate(evaluator, MATMUL, BLOCKED_MATMUL, "kbench")
    assert r.outcome is Outcome.CORRECT, (r.outcome, r.error[:500])
    assert r.max_abs_err is not None and r.max_abs_err > 0  # not bit-identical to PyTorch's order
    assert r.allclose_kernelbench is not None
    assert all(t["bound"] is not None and t["max_abs_err"] <= t["bound"] for t in r.extra["trials"])


HALF_SCALE = _TRITON_HEAD + '''
@triton.jit
def _affine(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    tl.store(y_ptr + offs, (x * alpha + 0.25).to(y_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        if x.dtype != torch.float16:
            raise TypeError(f"input arrived as {x.dtype}")
        y = torch.empty_like(x)
        _affine[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), self.alpha, BLOCK=256)
        return y
'''


def test_fp16_run_feeds_fp16_and_judges_at_fp16(evaluator: DeviceEvaluator) -> None:
    r = evaluate(evaluator, AFFINE, HALF_SCALE, "kbench", "fp16")
    assert r.outcome is Outcome.CORRECT, (r.outcome, r.error[:500])


FUNCTIONAL = _TRITON_HEAD + _MUL_KERNEL + '''

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return torch.nn.functional.relu(_launch(x, self.w)) + _launch(x, self.w).clamp(max=0)
'''


def test_cuda_agent_forbids_torch_nn_functional_in_forward(evaluator: DeviceEvaluator) -> None:
    r = evaluate(evaluator, SCALED, FUNCTIONAL, "cuda-agent")
    assert r.outcome is Outcome.RUNTIME_ERROR and "forbidden" in r.error, (r.outcome, r.error[:500])


SLOW_WITH_GRAD = _TRITON_HEAD + _MUL_KERNEL + '''
import time


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x):
        if torch.is_grad_enabled():
            time.sleep(0.1)
        return _launch(x, self.w)
'''

SLOW_WITH_GRAD_PROBLEM = Problem(1, 9, "Slow_with_grad", _HEAD + '''
import time


class Model(nn.Module):
    def forward(self, x):
        if torch.is_grad_enabled():
            time.sleep(0.1)
        return x * 2.0


def get_inputs():
    return [torch.rand(8, 8)]


def get_init_inputs():
    return []
''')


def test_kernelbench_times_the_candidate_with_autograd_on_and_the_reference_under_no_grad(
        evaluator: DeviceEvaluator) -> None:
    kb = evaluate(evaluator, SCALED, SLOW_WITH_GRAD, "kernelbench", trials=3, max_trials=3)
    ours = evaluate(evaluator, SCALED, SLOW_WITH_GRAD, "kbench", trials=3, max_trials=3)
    assert kb.candidate is not None and ours.candidate is not None, (kb.error, ours.error)
    assert min(kb.candidate.samples_ms) >= 95.0  # autograd on while timed (KernelBench)
    assert max(ours.candidate.samples_ms) < 80.0  # kbench times under no_grad
    for name in ("kernelbench", "kbench"):
        proto = get_protocol(name, **{**_FAST, "trials": 3, "max_trials": 3})
        eager = evaluator.measure_baselines(SLOW_WITH_GRAD_PROBLEM, proto, 0, ["eager"])["eager"]
        assert max(eager.samples_ms) < 80.0, name  # the reference is timed under no_grad


GRAD_PROBE = _scaled_candidate("torch.randn(n)", extra=" + (1.0 if torch.is_grad_enabled() else 0.0)")


def test_kernelbench_correctness_trials_run_under_no_grad(evaluator: DeviceEvaluator) -> None:
    r = evaluate(evaluator, SCALED, GRAD_PROBE, "kernelbench")
    assert r.outcome is Outcome.CORRECT, (r.outcome, r.error[:300])


# -- a run's protocol is stored, and never mixed in a table -----------------------------------------


def _result(outcome: Outcome, cand_ms: float) -> EvalResult:
    st = TimingStats(cand_ms, cand_ms, 0.0, cand_ms, cand_ms, cand_ms, cand_ms, 3, (cand_ms,) * 3)
    return EvalResult(outcome, compiled=True, correct=outcome is Outcome.CORRECT, candidate=st, eager_ms=1.0,
                      compile_ms=1.0, max_abs_err=0.0, max_rel_err=0.0)


@pytest.fixture()
def two_protocol_store(tmp_path: Path) -> Iterator[Any]:
    from kernelbench_harness.store import Store

    store = Store(f"sqlite:///{tmp_path / 'kb.db'}")
    hw = {"hardware_fingerprint": "hw-test", "device_name": "test device"}
    for run, name, ms in (("run-kernelbench", "kernelbench", 0.5), ("run-kbench", "kbench", 2.0)):
        proto = get_protocol(name)
        store.create_run(run, model="scripted", protocol=proto.to_dict(), config={}, hardware=hw,
                         problems=[AFFINE])
        cand = Candidate(1, 1, SAME_INIT, Backend.TRITON, model="scripted")
        store.record_attempt(run, problem=AFFINE, candidate=cand, model="scripted", sample_id=0, turn=0,
                             messages=None, reply=None, generation=None, result=_result(Outcome.CORRECT, ms))
        store.set_run_status(run, "finished")
    yield store
    store.close()


def test_a_run_stores_its_protocol(two_protocol_store: Any) -> None:
    for run, name in (("run-kernelbench", "kernelbench"), ("run-kbench", "kbench")):
        info = two_protocol_store.get_run(run)
        assert info.protocol_name == name
        assert Protocol.from_dict(info.protocol) == get_protocol(name)
        assert info.protocol_fingerprint == get_protocol(name).fingerprint()


def test_leaderboard_groups_never_hold_two_protocols(two_protocol_store: Any) -> None:
    from kernelbench_harness.reporting import build_leaderboard_data

    data = build_leaderboard_data([(two_protocol_store, "run-kernelbench", "runs/a/index.html"),
                                   (two_protocol_store, "run-kbench", "runs/b/index.html")], n_resamples=10)
    groups = data["groups"] if isinstance(data["groups"], list) else list(data["groups"].values())
    assert len(groups) == 2
    assert all(len(g["protocol_fingerprints"]) == 1 for g in groups)
    by_protocol = {r["protocol"]: r["group_id"] for r in data["rows"]}
    assert set(by_protocol) == {"kernelbench", "kbench"}
    assert by_protocol["kernelbench"] != by_protocol["kbench"]


def test_one_table_refuses_results_of_two_protocols(two_protocol_store: Any) -> None:
    from kernelbench_harness.metrics import summarize_run

    frames = [two_protocol_store.results_frame(r) for r in ("run-kernelbench", "run-kbench")]
    mixed = pd.concat(frames, ignore_index=True)
    assert "protocol" in mixed.columns or "protocol_fingerprint" in mixed.columns
    with pytest.raises((ValueError, KbenchError)):
        summarize_run(mixed, [AFFINE], n_resamples=10)


def test_time_based_warm_up_and_minimum_time_hold_a_fast_callable_for_their_whole_span() -> None:
    # 5 warm-up calls of a fast callable end long before 40 ms; the adaptive loop's CI is narrow after 20
    # trials of it, but it must keep timing for min_time_s (a GPU idle beforehand ramps its clocks then)
    s = timing.TimerSettings(timer="wall", warmup=5, trials=20, adaptive=True, max_trials=100000,
                             target_ci_rel=0.5, time_budget_s=10.0, warmup_ms=40.0, min_time_s=0.08)
    calls: list[float] = []

    def fn(i: int) -> None:
        calls.append(time.perf_counter())
        time.sleep(0.0005)

    t0 = time.perf_counter()
    stats, info = timing.time_callable(fn, CPU, s)
    warm = info["warmup_calls"]
    assert warm > 5 and info["warmup_s"] >= 0.04
    assert calls[warm - 1] - calls[0] < 0.06  # the warm-up stopped once its 40 ms had passed
    assert info["elapsed_s"] >= 0.08 and info["stopped"] == "ci"
    assert stats.n == len(calls) - warm > 20
    assert time.perf_counter() - t0 < 2.0
    # without them: 5 warm-up calls and 20 trials (the CI is already within 50%)
    s0 = timing.TimerSettings(timer="wall", warmup=5, trials=20, adaptive=True, max_trials=100000,
                              target_ci_rel=0.5, time_budget_s=10.0)
    calls.clear()
    stats0, info0 = timing.time_callable(fn, CPU, s0)
    assert info0["warmup_calls"] == 5 and stats0.n == 20


def test_kbench_warms_up_by_time_and_times_for_a_minimum_while_the_others_keep_their_procedures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "l2_flush_bytes_for", lambda *a: 0)  # no CUDA device on this machine
    kb, kbm, ca = get_protocol("kbench"), get_protocol("kernelbench"), get_protocol("cuda-agent")
    assert (kb.warmup_ms, kb.min_time_s) == (100.0, 0.25) and kb.max_trials >= 2000
    assert (kbm.warmup_ms, kbm.min_time_s, ca.warmup_ms, ca.min_time_s) == (0.0, 0.0, 0.0, 0.0)
    cuda = torch.device("cuda")
    # the GPU timer gets them; a CPU smoke run does not
    assert (timing.TimerSettings.from_protocol(kb, cuda).warmup_ms, timing.TimerSettings.from_protocol(kb, cuda).min_time_s) == (100.0, 0.25)
    assert (timing.TimerSettings.from_protocol(kb, CPU).warmup_ms, timing.TimerSettings.from_protocol(kb, CPU).min_time_s) == (0.0, 0.0)
    # a protocol stored before the fields existed reads back without them, with its fingerprints unchanged
    old = kbm.to_dict()
    del old["warmup_ms"], old["min_time_s"]
    back = Protocol.from_dict(old)
    assert (back.warmup_ms, back.min_time_s) == (0.0, 0.0)
    assert back.fingerprint() == kbm.fingerprint() == "db9af2d9e5bc213b"  # as stored by the 2026-12-01 runs
    assert back.timing_fingerprint() == kbm.timing_fingerprint()
    old_kb = kb.to_dict()
    del old_kb["warmup_ms"], old_kb["min_time_s"]
    assert (Protocol.from_dict(old_kb).warmup_ms, Protocol.from_dict(old_kb).min_time_s) == (0.0, 0.0)
    # and kbench's new timer is a different baseline key from the old one
    assert Protocol.from_dict(old_kb).timing_fingerprint() != kb.timing_fingerprint()
