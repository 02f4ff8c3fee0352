"""The reference context's memory budget (``KBENCH_REF_BUDGET_BYTES``): above it, references are not
stored but evaluated again at each comparison ("lazy"), and every verdict stays what it is when they
are stored.

Each test runs the same problem, candidates and run seed under both modes: the variable unset (on the
CPU the budget is unlimited, so the references are stored) and set to 1 byte (every problem is over
it). The evaluator makes a new context when the budget changes, so both modes run in one evaluator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from execution.evalkit import AFFINE, FAST_KBENCH, FAST_KERNELBENCH, describe, evaluate
from kernelbench_harness.core import EvalResult, Outcome, Problem
from kernelbench_harness.execution.device import DeviceEvaluator, ProblemContext
from kernelbench_harness.protocols import Protocol, get_protocol

ENV = "KBENCH_REF_BUDGET_BYTES"
CPU = torch.device("cpu")
RUN_SEED = 7

_TRITON_AFFINE = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, out_ptr, n, alpha, beta, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha + beta, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        affine_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), self.alpha, BETA, BLOCK=1024)
        return out
'''
CORRECT = _TRITON_AFFINE.replace("BETA", "1.0")
WRONG = _TRITON_AFFINE.replace("BETA", "1.001")

# y = 2 x + 1 plus a fresh uniform draw below 1e-5: a second evaluation differs (flagged
# nondeterministic-reference, judged with allclose), yet the affine candidate is within tolerance of
# any draw. Its error against the stored draw is the draw itself: judged against another draw
# (a reference evaluated again), the error would differ.
_RANDOM_AFFINE_CODE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return x * self.alpha + 1.0 + 1e-5 * torch.rand_like(x)


def get_inputs():
    return [torch.randn(8, 256)]


def get_init_inputs():
    return [2.0]
'''
RANDOM_AFFINE = Problem(1, 911, "RandomAffine_test", _RANDOM_AFFINE_CODE, "tests/execution/test_reference_budget.py")

# A linear layer, tanh and an integer input: the float64 twin differs from the run-precision
# reference (fp32 and fp16), and the kernelbench protocol casts the integer input to float.
_MIXED_CODE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 32)

    def forward(self, x, k):
        return torch.tanh(self.lin(x)) * k, (x * x).sum(dim=1)


def get_inputs():
    return [torch.randn(16, 64), torch.randint(1, 4, (16, 32))]


def get_init_inputs():
    return []
'''
MIXED = Problem(1, 912, "Mixed_test", _MIXED_CODE, "tests/execution/test_reference_budget.py")


def _state(ctx: ProblemContext) -> dict[str, Any]:
    """What a context keeps (read before the evaluator frees it for the next one)."""
    return {"lazy_refs": ctx.lazy_refs, "n_refs": len(ctx.refs),
            "n_refs64": None if ctx.refs64 is None else len(ctx.refs64), "fp64_judge": ctx.fp64_judge,
            "ref_estimate_bytes": ctx.ref_estimate_bytes, "out_nbytes": ctx.out_nbytes, "flags": list(ctx.flags)}


def _both_modes(ev: DeviceEvaluator, monkeypatch: pytest.MonkeyPatch, source: str, problem: Problem = AFFINE,
                protocol: Protocol = FAST_KBENCH
                ) -> tuple[EvalResult, dict[str, Any], EvalResult, ProblemContext]:
    """``source`` evaluated with the references stored, then lazy: the stored result and what its
    context kept, the lazy result and its context (still the evaluator's current one)."""
    monkeypatch.delenv(ENV, raising=False)
    stored = evaluate(ev, source, problem, protocol=protocol, run_seed=RUN_SEED)
    stored_ctx = ev.context(problem, protocol, RUN_SEED)
    stored_state = _state(stored_ctx)
    monkeypatch.setenv(ENV, "1")
    lazy = evaluate(ev, source, problem, protocol=protocol, run_seed=RUN_SEED)
    lazy_ctx = ev.context(problem, protocol, RUN_SEED)
    assert lazy_ctx is not stored_ctx  # a new budget made a new context
    assert stored_ctx.refs == [] and stored_ctx.model is None  # ... and freed the old one
    return stored, stored_state, lazy, lazy_ctx


def _assert_same_verdict(stored: EvalResult, lazy: EvalResult) -> None:
    assert lazy.outcome is stored.outcome, f"stored: {describe(stored)}\nlazy: {describe(lazy)}"
    assert lazy.max_abs_err == stored.max_abs_err
    assert lazy.max_rel_err == stored.max_rel_err
    assert lazy.extra["trials"] == stored.extra["trials"]  # ok, errors, bound and ref_err of every trial
    assert {f.check for f in lazy.findings} == {f.check for f in stored.findings}


@pytest.mark.parametrize("source, outcome", [(CORRECT, Outcome.CORRECT), (WRONG, Outcome.INCORRECT)],
                         ids=["correct", "wrong"])
def test_lazy_references_judge_as_stored_ones(evaluator: DeviceEvaluator, monkeypatch: pytest.MonkeyPatch,
                                              source: str, outcome: Outcome) -> None:
    stored, _, lazy, _ = _both_modes(evaluator, monkeypatch, source)
    assert stored.outcome is outcome, describe(stored)
    _assert_same_verdict(stored, lazy)
    # judged against the float64 twin in both modes: y = 2x + 1 rounds in fp32, so errors are not 0
    assert all(t["ref_err"] is not None and t["bound"] is not None for t in lazy.extra["trials"])
    if outcome is Outcome.CORRECT:
        assert lazy.max_abs_err is not None and 0 < lazy.max_abs_err < 1e-6
    else:
        assert lazy.max_abs_err == pytest.approx(0.001, rel=1e-3)


def test_lazy_context_stores_no_references(evaluator: DeviceEvaluator, monkeypatch: pytest.MonkeyPatch) -> None:
    stored, stored_state, lazy, lazy_ctx = _both_modes(evaluator, monkeypatch, CORRECT)
    n_sets = FAST_KBENCH.correct_trials + 1
    # 8 x 256 float32 outputs and their float64 twins, for every input set
    estimate = n_sets * 8 * 256 * (4 + 8)
    assert stored_state == {"lazy_refs": False, "n_refs": n_sets, "n_refs64": n_sets, "fp64_judge": True,
                            "ref_estimate_bytes": estimate, "out_nbytes": 8 * 256 * 4, "flags": []}
    assert _state(lazy_ctx) == {**stored_state, "lazy_refs": True, "n_refs": 0, "n_refs64": None}
    assert lazy_ctx._m64 is not None  # the float64 model is made once and kept
    assert stored.extra["reference_mode"] == "stored" and lazy.extra["reference_mode"] == "lazy"
    assert lazy.extra["reference_estimate_bytes"] == estimate and lazy.extra["reference_budget_bytes"] == 1
    assert stored.extra["reference_budget_bytes"] is None  # unlimited on the CPU without the variable
    assert "problem_flags" not in lazy.extra  # a mode, not a finding about the problem
    lazy_ctx.free()
    assert lazy_ctx._m64 is None and lazy_ctx.model is None and not lazy_ctx.dir.exists()


@pytest.mark.parametrize("source, outcome", [(CORRECT, Outcome.CORRECT), (WRONG, Outcome.INCORRECT)],
                         ids=["correct", "wrong"])
def test_nondeterministic_reference_stays_stored(evaluator: DeviceEvaluator, monkeypatch: pytest.MonkeyPatch,
                                                 source: str, outcome: Outcome) -> None:
    stored, stored_state, lazy, lazy_ctx = _both_modes(evaluator, monkeypatch, source, RANDOM_AFFINE)
    assert stored.outcome is outcome, describe(stored)
    # the same draws, judged against the same stored draws: the same errors to the last bit (a reference
    # evaluated again would be another draw, and the correct candidate's error the size of that draw)
    _assert_same_verdict(stored, lazy)
    n_sets = FAST_KBENCH.correct_trials + 1
    # judged with allclose: no float64 twin, in either mode
    assert stored_state == {"lazy_refs": False, "n_refs": n_sets, "n_refs64": None, "fp64_judge": False,
                            "ref_estimate_bytes": n_sets * 8 * 256 * 4, "out_nbytes": 8 * 256 * 4,
                            "flags": ["nondeterministic-reference"]}
    assert _state(lazy_ctx) == stored_state  # over the budget, and stored all the same
    assert lazy.extra["reference_mode"] == "stored"
    assert lazy.extra["problem_flags"] == ["nondeterministic-reference"]
    assert all(t["ref_err"] is None for t in lazy.extra["trials"])  # allclose, as in stored mode


@pytest.mark.parametrize("protocol", [FAST_KBENCH, get_protocol("kbench", "fp16"), FAST_KERNELBENCH],
                         ids=["kbench-fp32", "kbench-fp16", "kernelbench"])
def test_lazy_compare_equals_stored_compare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            protocol: Protocol) -> None:
    """Every field of every set's comparison, for outputs near and far from the reference, at both
    precisions, with an integer input (cast to float by the kernelbench protocol)."""
    monkeypatch.delenv(ENV, raising=False)
    stored = ProblemContext(MIXED, protocol, 3, CPU, tmp_path / "stored")
    monkeypatch.setenv(ENV, "1")
    lazy = ProblemContext(MIXED, protocol, 3, CPU, tmp_path / "lazy")
    assert not stored.lazy_refs and lazy.lazy_refs and lazy.refs == []
    assert lazy.fp64_judge is (protocol.judge == "fp64-bound")
    gen = torch.Generator().manual_seed(0)
    for i in range(protocol.correct_trials + 1):
        for scale in (1e-3, 0.0, 1.0):
            outs = [r + scale * torch.randn(r.shape, generator=gen).to(r.dtype) for r in stored.refs[i]]
            want, got = stored.compare(outs, i), lazy.compare(outs, i)
            assert got == want, (i, scale)
        if protocol.judge == "fp64-bound":
            assert want.ref_err is not None and want.ref_err > 0
    stored.free()
    lazy.free()


def test_budget_at_or_above_the_estimate_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    first = ProblemContext(AFFINE, FAST_KBENCH, 3, CPU, tmp_path / "a")
    monkeypatch.setenv(ENV, str(first.ref_estimate_bytes))
    exact = ProblemContext(AFFINE, FAST_KBENCH, 3, CPU, tmp_path / "b")
    below = ProblemContext(AFFINE, FAST_KBENCH, 3, CPU, tmp_path / "c", ref_budget_bytes=first.ref_estimate_bytes - 1)
    assert not exact.lazy_refs and len(exact.refs) == FAST_KBENCH.correct_trials + 1
    assert below.lazy_refs and below.refs == []


@pytest.mark.parametrize("raw", ["abc", "-1", "1.5e9", "12GB"])
def test_bad_budget_is_a_clear_error(evaluator: DeviceEvaluator, monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(ENV, raw)
    with pytest.raises(ValueError, match=f"{ENV}=.*non-negative integer"):
        ProblemContext.reference_budget_bytes(CPU)
    with pytest.raises(ValueError, match=ENV):
        evaluate(evaluator, CORRECT)


@pytest.mark.parametrize("raw, want", [(None, None), ("", None), ("0", 0), (" 123 ", 123), (str(1 << 40), 1 << 40)])
def test_budget_values(monkeypatch: pytest.MonkeyPatch, raw: str | None, want: int | None) -> None:
    if raw is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, raw)
    assert ProblemContext.reference_budget_bytes(CPU) == want


FAILS_AT_COMPARISON = '''
import torch
import torch.nn as nn
CALLS = [0]
class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha
    def forward(self, x):
        CALLS[0] += 1
        if CALLS[0] >= 4:  # set-up: set 0 twice and its float64 evaluation; then the lazy comparisons
            raise RuntimeError("CUDA out of memory. Tried to allocate 12.00 GiB (simulated)")
        return x * self.alpha + 1.0
def get_inputs():
    return [torch.randn(8, 256)]
def get_init_inputs():
    return [2.0]
'''


def test_a_reference_that_fails_at_a_lazy_comparison_is_the_references_failure(
        evaluator: DeviceEvaluator, monkeypatch: pytest.MonkeyPatch) -> None:
    # in lazy mode the trusted side evaluates the reference while the candidate's process is alive; if
    # that fails (out of device memory, say), the result is the reference's runtime error, as at set-up,
    # and evaluate() returns instead of raising with the candidate's process left running
    monkeypatch.setenv(ENV, "1")
    problem = Problem(1, 993, "FailsAtComparison", FAILS_AT_COMPARISON, "993_FailsAtComparison.py")
    res = evaluate(evaluator, CORRECT, problem, protocol=FAST_KBENCH)
    assert res.outcome is Outcome.RUNTIME_ERROR, describe(res)
    assert res.error.startswith("reference failed") and "input set 0" in res.error
    assert res.extra.get("reference_error") is True
    # the device slot goes on: the next problem's candidate is judged normally
    monkeypatch.delenv(ENV)
    again = evaluate(evaluator, CORRECT, Problem(1, 994, "Affine", FAILS_AT_COMPARISON.replace(
        "CALLS[0] >= 4", "False"), "994_Affine.py"), protocol=FAST_KBENCH)
    assert again.outcome is Outcome.CORRECT, describe(again)
