"""What a lazy comparison costs (``KBENCH_REF_BUDGET_BYTES`` exceeded, references evaluated at each
comparison), and that the work it saves is not judged differently.

- one reference evaluation (run precision and float64) per comparison, none redone: counted in the
  problem's own module, per comparison and over a whole candidate evaluation;
- one copy of the input set per comparison (on a GPU, one host-to-device transfer): the float64
  twin's inputs are upcast from that copy on the device, not copied from the host again;
- a reference that writes into its inputs changes neither the stored input sets nor the float64
  twin's inputs (on the CPU too, where a copy "to the device" used to be the stored tensor itself);
- tensors cross the host in chunks through one staging buffer (:mod:`.tensorio`), byte for byte as
  the whole-tensor path writes and reads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import kernelbench_harness.execution.device as device_mod
from execution.evalkit import FAST_KBENCH, describe, evaluate
from execution.test_reference_budget import CORRECT
from kernelbench_harness.core import Outcome, Problem
from kernelbench_harness.execution import tensorio
from kernelbench_harness.execution import timing as _timing
from kernelbench_harness.execution.device import DeviceEvaluator, ProblemContext
from kernelbench_harness.protocols import Protocol, get_protocol

ENV = "KBENCH_REF_BUDGET_BYTES"
CPU = torch.device("cpu")

# y = 2 x + 1 (the candidates of test_reference_budget.py compute it), counting the evaluations by the
# dtype they run at: float32 (the run's precision) and float64 (the fp64-bound judge's twin)
_COUNTED = '''\
import torch
import torch.nn as nn

CALLS = {}


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        CALLS[str(x.dtype)] = CALLS.get(str(x.dtype), 0) + 1
        return FORWARD


def get_inputs():
    return [torch.randn(8, 256)]


def get_init_inputs():
    return [2.0]
'''
COUNTED = Problem(1, 921, "Counted_test", _COUNTED.replace("FORWARD", "x * self.alpha + 1.0"),
                  "tests/execution/test_lazy_reference_cost.py")
# the same function, computed in the input's own buffer: x *= alpha, then x + 1 (the same roundings)
IN_PLACE = Problem(1, 922, "InPlace_test", _COUNTED.replace("FORWARD", "x.mul_(self.alpha) + 1.0"),
                   "tests/execution/test_lazy_reference_cost.py")

_TRITON_AFFINE = CORRECT  # y = alpha * x + 1 through one Triton kernel


def _calls(ctx: ProblemContext) -> dict[str, int]:
    return dict(ctx.module.CALLS)


def _context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, problem: Problem, lazy: bool,
             protocol: Protocol = FAST_KBENCH, name: str = "") -> ProblemContext:
    if lazy:
        monkeypatch.setenv(ENV, "1")
    else:
        monkeypatch.delenv(ENV, raising=False)
    ctx = ProblemContext(problem, protocol, 3, CPU, tmp_path / (name or ("lazy" if lazy else "stored")))
    assert ctx.lazy_refs is lazy and ctx.flags == []
    return ctx


def _near(ref: list[Any], gen: torch.Generator, scale: float = 1e-7) -> list[Any]:
    return [r + scale * torch.randn(r.shape, generator=gen) for r in ref]


def test_one_evaluation_and_one_copy_per_lazy_comparison(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lazy = _context(tmp_path, monkeypatch, COUNTED, lazy=True)
    # set-up: set 0 twice at run precision (the nondeterminism check), once in float64 (does it work?)
    assert _calls(lazy) == {"torch.float32": 2, "torch.float64": 1}
    copies: list[list[Any]] = []
    upcast_from: list[list[Any]] = []
    fresh_on, upcast = device_mod._fresh_on, device_mod._upcast

    def counted_fresh_on(vals: list[Any], device: torch.device) -> list[Any]:
        copies.append(fresh_on(vals, device))
        return copies[-1]

    def counted_upcast(vals: list[Any], device: torch.device) -> list[Any]:
        upcast_from.append(vals)
        return upcast(vals, device)

    monkeypatch.setattr(device_mod, "_fresh_on", counted_fresh_on)
    monkeypatch.setattr(device_mod, "_upcast", counted_upcast)
    gen = torch.Generator().manual_seed(1)
    n_sets = FAST_KBENCH.correct_trials + 1
    for i in range(n_sets):
        before = _calls(lazy)
        x = lazy.sets_cpu[i][0]
        cmp = lazy.compare(_near([x * 2.0 + 1.0], gen), i)
        assert cmp.ok and cmp.ref_err is not None
        assert _calls(lazy) == {"torch.float32": before["torch.float32"] + 1,
                                "torch.float64": before["torch.float64"] + 1}, i
        # one copy of the set, and the float64 twin's inputs made from it (not from the host again)
        assert len(copies) == len(upcast_from) == i + 1
        assert upcast_from[-1] is copies[-1]
    # a refreshed set (the timed-output check): one copy too, the float64 inputs from the refreshed values
    before = _calls(lazy)
    lazy.compare_on(1, 5, _near([lazy.sets_cpu[1][0] * 2.0 + 1.0], gen))
    assert _calls(lazy) == {"torch.float32": before["torch.float32"] + 1, "torch.float64": before["torch.float64"] + 1}
    assert len(copies) == n_sets + 1 and len(upcast_from) == n_sets + 1
    lazy.free()


@pytest.mark.parametrize("lazy", [False, True], ids=["stored", "lazy"])
def test_reference_evaluations_per_candidate(evaluator: DeviceEvaluator, monkeypatch: pytest.MonkeyPatch,
                                             lazy: bool) -> None:
    """Over one candidate's whole evaluation: lazy mode evaluates the reference once per comparison
    that needs it (correctness, timed output, rechecks) and never more; stored mode only at set-up and
    for the timed outputs (refreshed values, evaluated in either mode)."""
    if lazy:
        monkeypatch.setenv(ENV, "1")
    else:
        monkeypatch.delenv(ENV, raising=False)
    evaluated: list[tuple[int, int | None]] = []
    compare_on = ProblemContext.compare_on

    def counted(self: ProblemContext, set_idx: int, round_: int | None, outs: list[Any]) -> Any:
        evaluated.append((set_idx, round_))
        return compare_on(self, set_idx, round_, outs)

    monkeypatch.setattr(ProblemContext, "compare_on", counted)
    res = evaluate(evaluator, _TRITON_AFFINE, COUNTED, run_seed=5)
    assert res.outcome is Outcome.CORRECT, describe(res)
    assert res.extra["reference_mode"] == ("lazy" if lazy else "stored")
    ctx = evaluator.context(COUNTED, FAST_KBENCH, 5)
    n_sets = FAST_KBENCH.correct_trials + 1
    timed = [e for e in evaluated if e[1] is not None]
    assert timed  # the timed output was judged on its refreshed inputs
    if lazy:
        # correctness (every set but the recheck set), the recheck set, set 0 again (both orders)
        assert sorted(e[0] for e in evaluated if e[1] is None) == sorted([*range(ctx.n_correct), ctx.recheck_set, 0])
        n = len(evaluated)
        assert _calls(ctx) == {"torch.float32": 2 + n, "torch.float64": 1 + n}
    else:
        assert evaluated == timed
        assert _calls(ctx) == {"torch.float32": n_sets + 1 + len(timed), "torch.float64": n_sets + len(timed)}


@pytest.mark.parametrize("lazy,tight", [(False, False), (True, False), (True, True)],
                         ids=["stored", "lazy", "lazy-memory-tight"])
def test_a_reference_that_writes_into_its_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 lazy: bool, tight: bool) -> None:
    """The stored sets stay as drawn, set 0 evaluates alike twice (no nondeterministic-reference flag),
    and every comparison, on the set as stored or refreshed, equals the judge run on references
    computed by hand from untouched inputs; also on the two-copy path a device short of memory takes
    (the reference first, then a second copy of the set for the float64 twin)."""
    ctx = _context(tmp_path, monkeypatch, IN_PLACE, lazy)
    monkeypatch.setattr(ProblemContext, "_memory_tight", lambda self: tight)
    drawn = [[v.clone() for v in s] for s in ctx.sets_cpu]
    gen = torch.Generator().manual_seed(2)
    for i in range(FAST_KBENCH.correct_trials + 1):
        for round_ in (None, 3):
            x = ctx.sets_cpu[i][0]
            if round_ is not None:
                x = _timing.refresh_values(x, round_, key=ctx.refresh_key)
            want_ref, want64 = [x * 2.0 + 1.0], [x.double() * 2.0 + 1.0]
            outs = _near(want_ref, gen)
            got = ctx.compare_on(i, round_, outs) if round_ is not None or lazy else ctx.compare(outs, i)
            assert got == ctx._judge(outs, want_ref, want64), (i, round_)
            assert got.ok
        if not lazy:
            x = ctx.sets_cpu[i][0]
            assert torch.equal(ctx.refs[i][0], x * 2.0 + 1.0) and torch.equal(ctx.refs64[i][0], x.double() * 2.0 + 1.0)
    assert all(torch.equal(a, b) for s, t in zip(ctx.sets_cpu, drawn) for a, b in zip(s, t))
    assert ctx.flags == []
    ctx.free()


@pytest.mark.parametrize("protocol", [FAST_KBENCH, get_protocol("kbench", "fp16")], ids=["fp32", "fp16"])
def test_refreshed_lazy_comparison_equals_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 protocol: Protocol) -> None:
    """The timed-output check (a refreshed set) judges alike in both modes, at both precisions."""
    stored = _context(tmp_path, monkeypatch, COUNTED, lazy=False, protocol=protocol)
    lazy = _context(tmp_path, monkeypatch, COUNTED, lazy=True, protocol=protocol)
    lazy.refresh_key = stored.refresh_key  # (each context draws its own key: the same rounds in both here)
    gen = torch.Generator().manual_seed(3)
    for i in range(protocol.correct_trials + 1):
        x = _timing.refresh_values(stored.sets_cpu[i][0].to(stored.dtype), 7, key=stored.refresh_key)
        for scale in (1e-3, 0.0):
            outs = [(x * 2.0 + 1.0) + scale * torch.randn(x.shape, generator=gen).to(x.dtype)]
            want = stored.compare_on(i, 7, outs)
            for tight in (False, True):  # one copy of the set, or two when the device is short of memory
                monkeypatch.setattr(ProblemContext, "_memory_tight", lambda self, t=tight: t)
                assert lazy.compare_on(i, 7, outs) == want, (i, scale, tight)
            outs0 = [lazy.sets_cpu[i][0].to(lazy.dtype) * 2.0 + 1.0]  # the set as stored, both paths
            monkeypatch.setattr(ProblemContext, "_memory_tight", lambda self: True)
            tight_cmp = lazy.compare_on(i, None, outs0)
            monkeypatch.setattr(ProblemContext, "_memory_tight", lambda self: False)
            assert tight_cmp == lazy.compare_on(i, None, outs0)
    stored.free()
    lazy.free()


# -- tensorio: staged transfers ------------------------------------------------------------------

_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int8, torch.bool,
           torch.complex64]


def _sample(dtype: torch.dtype, shape: tuple[int, ...] = (7, 13)) -> torch.Tensor:
    gen = torch.Generator().manual_seed(4)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=gen).to(dtype) * 3
    return torch.randint(-100, 100, shape, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", _DTYPES, ids=str)
@pytest.mark.parametrize("stage_bytes", [1, 10, 64, 1 << 16])
def test_staged_io_is_byte_for_byte(tmp_path: Path, dtype: torch.dtype, stage_bytes: int) -> None:
    """Chunks of any size (one byte, splitting elements, one chunk for all) write the file the
    whole-tensor path writes, and read back the same values."""
    t = _sample(dtype)
    desc = tensorio.write_tensor(t, tmp_path / "whole.bin")
    stage = torch.empty(stage_bytes, dtype=torch.uint8)
    tensorio._write_staged(t, tmp_path / "staged.bin", stage)
    assert (tmp_path / "staged.bin").read_bytes() == (tmp_path / "whole.bin").read_bytes()
    out = torch.empty(t.shape, dtype=dtype)
    tensorio._read_staged(tmp_path / "whole.bin", out, stage)
    assert torch.equal(out.view(torch.uint8) if dtype == torch.bool else out, t.view(torch.uint8)
                       if dtype == torch.bool else t)
    back = tensorio.read_tensor(desc, tmp_path, device=CPU)
    assert back.dtype == dtype and torch.equal(back, t)


def test_staged_read_of_a_file_that_shrank(tmp_path: Path) -> None:
    t = _sample(torch.float32)
    tensorio.write_tensor(t, tmp_path / "t.bin")
    with open(tmp_path / "t.bin", "r+b") as f:
        f.truncate(t.numel() * 4 - 3)
    with pytest.raises(tensorio.TensorFormatError, match="shorter"):
        tensorio._read_staged(tmp_path / "t.bin", torch.empty_like(t), torch.empty(16, dtype=torch.uint8))


def test_staging_buffer_is_kept_per_process() -> None:
    a = tensorio._staging()
    assert a is tensorio._staging() and a.numel() == tensorio.STAGE_BYTES and a.dtype == torch.uint8
