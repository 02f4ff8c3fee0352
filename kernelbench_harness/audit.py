"""Problem audit: find problems whose scores cannot mean what they claim.

A problem is suspect when a candidate that does no work passes it, when its output does not depend
on its input, when its reference cannot be reproduced, or when its time measures launch overhead
rather than a kernel. Robust-kbench and METR filtered KernelBench tasks for such reasons, and
PROTOCOLS.md section 5 lists the known cases of KernelBench main (@ 423217d); this module checks
for every kind, on any problem set.

What :func:`audit_problem` does with one problem (all on the trusted side; no candidate code runs):

1. Estimates its size without allocating (forward inputs plus the model's parameters and buffers,
   built on the ``meta`` device); beyond ``max_elements`` the problem is skipped (``skipped-size``).
2. Builds the model after ``torch.manual_seed(42)`` and draws ``seeds`` input sets with KernelBench
   main's trial seeds (seed 42, then one ``torch.randint`` seed per set), so on the CPU the audit sees
   exactly the inputs KernelBench's correctness trials use. On a GPU the inputs and weights are
   drawn on the device (same distributions, other values), which is much faster for large problems.
3. Runs the reference under ``no_grad`` on each set, and once more on set 0 (same inputs) while
   watching the random-number generators; TF32 is off (strict fp32).
4. Judges four trivial candidates (zeros, ones, the first input returned unchanged, and a constant
   equal to the mean of set 0's output) with the evaluator's own judge
   (:func:`~kernelbench_harness.execution.verify.compare_outputs`) under each protocol's settings:
   ``allclose`` against the run-precision reference, or ``fp64-bound`` against a float64
   evaluation of the reference (computed for set 0, and for later sets while a trivial candidate
   still passes). Large outputs are judged on a sample first and then in pieces that give the judge
   exactly its whole-tensor bound. The float64 evaluation also shows whether the fp32 reference is
   itself mostly rounding noise (``ill-conditioned``).
5. Times the eager reference: on a GPU with CUDA events and an L2 flush (the evaluator's timing
   code); on the CPU from the wall time of the calls above (recorded, never flagged).

:func:`audit_problems` runs each problem in a child process with a time limit, so a problem that
crashes or hangs becomes a flag, never a failure of the audit.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import json
import logging
import math
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import traceback
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import torch

from .core import LAUNCH_BOUND_US, Problem
from .errors import ConfigError
from .protocols import PROTOCOL_NAMES, Protocol, get_protocol

__all__ = [
    "DEGENERATE",
    "ILL_CONDITIONED_REL",
    "KNOWN_DEFECTS",
    "SCHEMA_VERSION",
    "TRIVIAL_KINDS",
    "AuditFlag",
    "AuditReport",
    "KnownDefect",
    "audit_problem",
    "audit_problems",
    "audit_to_json",
    "estimate_elements",
    "flag_counts",
    "kernelbench_trial_seeds",
    "known_defect_status",
    "load_audit_json",
    "run_flags",
]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
TRIVIAL_KINDS = ("zeros", "ones", "input", "mean")
DEGENERATE = "degenerate"
"""The flag reports use to score a problem apart (see :func:`run_flags`)."""

# allclose passes an all-zero candidate when every |ref| <= atol + rtol * |ref|.
_SMALL_TOLERANCES = {"1e-4": 1e-4, "1e-2": 1e-2}
ILL_CONDITIONED_REL = 1e-3
"""``ill-conditioned`` when the fp32 reference is further than this from the float64 one, relative to
max |float64 output| (an honest fp32 evaluation is typically within 1e-6 to 1e-5 of it)."""
_DTYPE = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_KB_SEED = 42


class AuditFlag(StrEnum):
    """What the audit can say about a problem.

    ``degenerate-constant``: the output does not depend on the input (identical for input sets that
    differ, or one value repeated over a whole output tensor).
    ``degenerate-small``: max |output| is at or below the 1e-2 allclose tolerance (KernelBench's fp16 /
    bf16 tolerance, CUDA Agent's and KernelBench v0's fp32 one), so zeros pass an allclose judge
    there; the evidence also says whether it is below the 1e-4 fp32 tolerance.
    ``trivial-passes:<kind>``: a candidate that does no work passes under at least one audited
    protocol (the evidence names which): ``zeros``, ``ones``, ``input`` (the first input returned
    unchanged, when shapes match), ``mean`` (a constant equal to the mean of one earlier output).
    ``seed-independent``: ``get_inputs()`` returns the same values whatever the seed (or no tensor at
    all), so "fresh" input sets are not fresh and the answer can be memorised.
    ``nondeterministic``: the reference gives different outputs on the same inputs, or consumes the
    random-number generator in ``forward`` (dropout in training mode, random tensors drawn in
    ``forward``), so no candidate can reproduce it exactly.
    ``ill-conditioned``: the fp32 reference is far from a float64 evaluation of itself (max error
    above 1e-3 of max |output|) although it is deterministic: its output is mostly rounding noise,
    KernelBench's 1e-4 rejects honest kernels and kbench's float64 bound (a multiple of that error)
    stops discriminating. Checked when a ``fp64-bound`` protocol is audited.
    ``int-inputs``: integer or boolean inputs that must never be cast to float (the evidence says
    what casting them does to the reference).
    ``launch-bound``: on a GPU, eager time below the threshold (20 us by default): the speedup then
    measures launch overhead (PROTOCOLS.md section 6). Never set on a CPU.
    ``reference-error``: the problem's own code fails (or its process crashed).
    ``skipped-size``: not audited: larger than ``max_elements``, or out of memory.
    ``skipped-time``: not audited: ran past its time limit, or the audit's time budget ran out first.
    """

    DEGENERATE_CONSTANT = "degenerate-constant"
    DEGENERATE_SMALL = "degenerate-small"
    TRIVIAL_ZEROS = "trivial-passes:zeros"
    TRIVIAL_ONES = "trivial-passes:ones"
    TRIVIAL_INPUT = "trivial-passes:input"
    TRIVIAL_MEAN = "trivial-passes:mean"
    SEED_INDEPENDENT = "seed-independent"
    NONDETERMINISTIC = "nondeterministic"
    ILL_CONDITIONED = "ill-conditioned"
    INT_INPUTS = "int-inputs"
    LAUNCH_BOUND = "launch-bound"
    REFERENCE_ERROR = "reference-error"
    SKIPPED_SIZE = "skipped-size"
    SKIPPED_TIME = "skipped-time"

    @staticmethod
    def trivial(kind: str) -> AuditFlag:
        """The ``trivial-passes:<kind>`` flag for one of :data:`TRIVIAL_KINDS`."""
        return AuditFlag(f"trivial-passes:{kind}")


_NOT_AUDITED = (AuditFlag.REFERENCE_ERROR, AuditFlag.SKIPPED_SIZE, AuditFlag.SKIPPED_TIME)


@dataclass(frozen=True, slots=True)
class AuditReport:
    """The audit's verdict on one problem.

    Attributes:
        key: ``"L{level}/{problem_id}"``.
        level, problem_id, name, code_sha256: the problem.
        flags: the flags raised, in :class:`AuditFlag` order.
        evidence: flag value -> what was seen (numbers, per-protocol verdicts, error text).
        eager_ms: eager reference time in ms where measured (CUDA events on a GPU, wall clock on
            the CPU), else None.
        device: where it was audited (``"cpu"``, ``"cuda:0"``).
        seconds: wall time the audit of this problem took (s).
        info: facts that are not flags: ``elements`` (size estimate), ``outputs`` (shapes and dtypes),
            ``max_abs_output``, ``trivial`` (kind -> protocol -> passed), ``fp64`` (how the float64
            reference went), ``timing`` (how eager_ms was measured), ``seeds``.
    """

    key: str
    level: int
    problem_id: int
    name: str
    code_sha256: str
    flags: tuple[AuditFlag, ...] = ()
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    eager_ms: float | None = None
    device: str = ""
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def audited(self) -> bool:
        """False when the problem could not be audited (reference error, skipped)."""
        return not any(f in _NOT_AUDITED for f in self.flags)

    def has(self, flag: AuditFlag | str) -> bool:
        """Whether ``flag`` was raised."""
        return str(flag) in {str(f) for f in self.flags}

    def trivial_passes(self, protocol_name: str) -> list[str]:
        """Trivial candidate kinds that pass under the protocol named ``protocol_name``."""
        table = self.info.get("trivial") or {}
        return [k for k in TRIVIAL_KINDS if (table.get(k) or {}).get(protocol_name)]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "level": self.level, "problem_id": self.problem_id, "name": self.name,
                "code_sha256": self.code_sha256, "flags": [str(f) for f in self.flags],
                "evidence": _jsonable(self.evidence), "eager_ms": self.eager_ms, "device": self.device,
                "seconds": round(self.seconds, 3), "info": _jsonable(self.info)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AuditReport:
        return cls(key=str(d["key"]), level=int(d["level"]), problem_id=int(d["problem_id"]), name=str(d["name"]),
                   code_sha256=str(d.get("code_sha256", "")),
                   flags=tuple(AuditFlag(f) for f in d.get("flags") or ()),
                   evidence={str(k): dict(v) for k, v in (d.get("evidence") or {}).items()},
                   eager_ms=d.get("eager_ms"), device=str(d.get("device", "")),
                   seconds=float(d.get("seconds") or 0.0), info=dict(d.get("info") or {}))


@dataclass(frozen=True, slots=True)
class KnownDefect:
    """A defect of KernelBench main (@ 423217d) that PROTOCOLS.md section 5 lists.

    Attributes:
        key, name: the problem (the name guards against another problem set's file at that key).
        flags: the audit catches it when it raises any of these.
        description: the defect, in words.
    """

    key: str
    name: str
    flags: tuple[str, ...]
    description: str


KNOWN_DEFECTS: tuple[KnownDefect, ...] = (
    KnownDefect("L2/83", "Conv3d_GroupNorm_Min_Clamp_Dropout", ("degenerate-constant",), "output identically zero"),
    KnownDefect("L2/66", "Matmul_Dropout_Softmax", ("degenerate-small",), "softmax values below the fp32 tolerance"),
    KnownDefect("L1/23", "Softmax", ("trivial-passes:zeros",), "zeros pass at tolerance 1e-2"),
    KnownDefect("L1/37", "FrobeniusNorm_", ("trivial-passes:zeros",), "zeros pass at tolerance 1e-2"),
    KnownDefect("L1/39", "L2Norm_", ("trivial-passes:zeros",), "zeros pass at tolerance 1e-2"),
    KnownDefect("L1/53", "Min_reduction_over_a_dimension", ("trivial-passes:zeros",), "zeros pass at tolerance 1e-2"),
    KnownDefect("L2/66", "Matmul_Dropout_Softmax", ("nondeterministic",), "dropout in training mode"),
    KnownDefect("L2/83", "Conv3d_GroupNorm_Min_Clamp_Dropout", ("nondeterministic",), "dropout in training mode"),
    KnownDefect("L3/35", "LSTM", ("nondeterministic",), "random initial states drawn inside forward"),
    KnownDefect("L1/95", "CrossEntropyLoss", ("int-inputs",), "int64 targets that casting to float breaks"),
    # torch.rand inputs are non-negative (in [0, 1)), on which these activations return their input
    KnownDefect("L1/19", "ReLU", ("trivial-passes:input",), "identity on non-negative torch.rand inputs"),
    KnownDefect("L1/20", "LeakyReLU", ("trivial-passes:input",), "identity on non-negative torch.rand inputs"),
    KnownDefect("L1/31", "ELU", ("trivial-passes:input",), "identity on non-negative torch.rand inputs"),
    KnownDefect("L1/32", "HardTanh", ("trivial-passes:input",), "identity on non-negative torch.rand inputs"),
)


# -- sizes and seeds ---------------------------------------------------------------------------------


def kernelbench_trial_seeds(n: int, base: int = _KB_SEED) -> list[int]:
    """KernelBench main's correctness-trial seeds: ``torch.manual_seed(base)``, then one
    ``torch.randint(0, 2**32 - 1, (1,))`` per trial (PROTOCOLS.md section 2). Leaves the CPU
    generator reseeded with ``base`` and advanced."""
    torch.manual_seed(base)
    return [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(n)]


def _exec_problem(problem: Problem) -> types.ModuleType:
    mod = types.ModuleType(f"kb_audit_L{problem.level}_{problem.problem_id}")
    exec(compile(problem.code, problem.source or problem.file_name, "exec"), mod.__dict__)  # noqa: S102 - trusted
    return mod


def _elements_of(mod: types.ModuleType) -> int:
    with torch.device("meta"):
        torch.manual_seed(0)
        vals = list(mod.get_inputs())
        model = mod.Model(*list(mod.get_init_inputs()))
    n = sum(v.numel() for v in vals if isinstance(v, torch.Tensor))
    if isinstance(model, torch.nn.Module):
        n += sum(t.numel() for t in model.state_dict().values() if isinstance(t, torch.Tensor))
    return int(n)


def estimate_elements(problem: Problem) -> int | None:
    """Elements of the forward inputs plus the model's parameters and buffers, found by building
    both on the ``meta`` device (nothing is allocated). None when that fails (a constructor that
    reads tensor values, for example).

    Intermediate activations and outputs are not counted: a problem that fits by this measure can
    still be slow or large, which the per-problem time limit of :func:`audit_problems` covers.
    """
    try:
        return _elements_of(_exec_problem(problem))
    except Exception as e:  # noqa: BLE001 - problem code: anything may go wrong on meta tensors
        log.debug("%s: no size estimate (%s)", problem.key, e)
        return None


# -- the audit of one problem ------------------------------------------------------------------------


def _resolve_protocols(protocol: Protocol | Sequence[Protocol] | None) -> list[Protocol]:
    if protocol is None:
        return [get_protocol(n) for n in PROTOCOL_NAMES]
    protos = [protocol] if isinstance(protocol, Protocol) else list(protocol)
    if not protos:
        raise ConfigError("the audit needs at least one protocol", fix="omit --protocol to audit under all three")
    if len({p.precision for p in protos}) > 1:
        raise ConfigError("the audited protocols must share one precision",
                          fix="audit each precision separately (--precision)")
    return protos


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _device_ctx(dev: torch.device) -> contextlib.AbstractContextManager[Any]:
    return torch.device(dev) if dev.type == "cuda" else contextlib.nullcontext()


def _to_device(vals: list[Any], dev: torch.device, dtype: torch.dtype) -> list[Any]:
    out = []
    for v in vals:
        if isinstance(v, torch.Tensor):
            v = v.to(dev)
            if v.is_floating_point():
                v = v.to(dtype)
        out.append(v)
    return out


def _clone(vals: list[Any]) -> list[Any]:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in vals]


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in _flatten(item)]
    return [x]


def _forward(model: Any, vals: list[Any], dev: torch.device) -> tuple[list[Any], float]:
    """Outputs (detached, flattened) of one call on clones of ``vals``, and its wall time in ms."""
    args = _clone(vals)
    _sync(dev)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model(*args)
    _sync(dev)
    dt = (time.perf_counter() - t0) * 1e3
    del args
    return [o.detach() if isinstance(o, torch.Tensor) else o for o in _flatten(out)], dt


def _rng_states(dev: torch.device) -> list[torch.Tensor]:
    states = [torch.random.get_rng_state()]
    if dev.type == "cuda":
        states.append(torch.cuda.get_rng_state(dev))
    return states


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if torch.equal(a, b):
            return True
        if not (a.is_floating_point() or a.is_complex()):
            return False
        na, nb = torch.isnan(a), torch.isnan(b)
        if not bool(na.any()) or not torch.equal(na, nb):
            return False
        return bool(torch.equal(torch.where(na, 0.0, a), torch.where(nb, 0.0, b)))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    return bool(a == b)


def _all_same(xs: list[Any], ys: list[Any]) -> bool:
    return len(xs) == len(ys) and all(_same(a, b) for a, b in zip(xs, ys))


def _max_abs_diff(xs: list[Any], ys: list[Any]) -> float | None:
    best: float | None = None
    for a, b in zip(xs, ys):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
            d = (a.double() - b.double()).abs().nan_to_num(0.0, 0.0, 0.0)
            m = float(d.max()) if d.numel() else 0.0
            best = m if best is None else max(best, m)
    return best


def _stochastic_modules(model: Any) -> list[str]:
    if not isinstance(model, torch.nn.Module):
        return []
    drop = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d, torch.nn.AlphaDropout,
            torch.nn.FeatureAlphaDropout)
    out = []
    for name, m in model.named_modules():
        if not m.training:
            continue
        if (isinstance(m, drop) and float(getattr(m, "p", 0.0)) > 0) or isinstance(m, torch.nn.RReLU):
            out.append(f"{name or '<model>'}: {m!r}")
        elif isinstance(m, torch.nn.RNNBase) and float(getattr(m, "dropout", 0.0)) > 0 and m.num_layers > 1:
            out.append(f"{name or '<model>'}: {type(m).__name__}(dropout={m.dropout})")
    return out


def _trivial_outputs(kind: str, refs: list[Any], vals: list[Any], means: list[Any]) -> list[Any] | None:
    """A trivial candidate's outputs for one input set, or None when the kind does not apply."""
    if kind == "input":
        if len(refs) != 1 or not vals or not isinstance(vals[0], torch.Tensor) \
                or not isinstance(refs[0], torch.Tensor) or tuple(vals[0].shape) != tuple(refs[0].shape):
            return None
        return [vals[0]]
    outs: list[Any] = []
    for r, m in zip(refs, means):
        if not isinstance(r, torch.Tensor):
            outs.append(0 if kind == "zeros" else 1 if kind == "ones" else m)
        elif kind == "zeros":
            outs.append(torch.zeros_like(r))
        elif kind == "ones":
            outs.append(torch.ones_like(r))
        else:
            outs.append(torch.full_like(r, m))
    return outs


def _fill_key(kind: str, means: list[Any]) -> tuple[float, ...] | None:
    """The values a constant trivial candidate fills its outputs with (one per output), or None when
    ``kind`` is not constant or a value is not a number. Candidates with equal keys give identical
    outputs, hence one verdict: ``mean`` is ``zeros`` when every output averages to 0 (L2/83)."""
    if kind in ("zeros", "ones"):
        return tuple(float(kind == "ones") for _ in means)
    if kind == "mean" and all(isinstance(m, (int, float)) for m in means):
        return tuple(float(m) for m in means)
    return None


def _means(refs: list[Any]) -> list[Any]:
    out: list[Any] = []
    for r in refs:
        if isinstance(r, torch.Tensor) and r.numel():
            if r.is_floating_point():
                out.append(float(r.nan_to_num(0.0, 0.0, 0.0).mean(dtype=torch.float64)))
            else:
                out.append(round(float(r.double().mean())))
        elif isinstance(r, torch.Tensor):
            out.append(0)
        else:
            out.append(r)
    return out


_SUBSET = 1 << 16  # elements judged first; the full judge runs only when they all pass
_CHUNK = 1 << 25  # larger outputs are judged in pieces, which bounds the judge's float64 temporaries


def _finite_abs(t: torch.Tensor) -> torch.Tensor:
    a = t.abs()
    return a.nan_to_num_(0.0, 0.0, 0.0) if a.is_floating_point() else a


def _ranges(n: int) -> list[tuple[int, int]]:
    return [(a, min(n, a + _CHUNK)) for a in range(0, n, _CHUNK)]


def _argmax_finite_abs(flat: torch.Tensor) -> int:
    best, arg = -1.0, 0
    for a, b in _ranges(flat.numel()):
        v, i = _finite_abs(flat[a:b]).max(0)
        if float(v) > best:
            best, arg = float(v), a + int(i)
    return arg


def _argmax_error(flat: torch.Tensor, f64: torch.Tensor) -> int:
    best, arg = -1.0, 0
    for a, b in _ranges(flat.numel()):
        # |x - y| where both are finite: a NaN or infinite operand makes the difference NaN or infinite
        err = (flat[a:b].double() - f64[a:b]).abs_().nan_to_num_(0.0, 0.0, 0.0)
        v, i = err.max(0)
        if float(v) > best:
            best, arg = float(v), a + int(i)
    return arg


def _reference_error(refs: list[Any], refs64: list[Any]) -> tuple[float, float]:
    """``(max |ref - ref64|, max |ref64|)`` over finite elements and every tensor output."""
    err = scale = 0.0
    for r, r64 in zip(refs, refs64):
        if not (isinstance(r, torch.Tensor) and isinstance(r64, torch.Tensor) and r.is_floating_point()
                and r.shape == r64.shape and r.numel()):
            continue
        flat, f64 = r.reshape(-1), r64.reshape(-1)
        for a, b in _ranges(flat.numel()):
            err = max(err, float((flat[a:b].double() - f64[a:b]).abs_().nan_to_num_(0.0, 0.0, 0.0).max()))
            scale = max(scale, float(_finite_abs(f64[a:b]).max()))
    return err, scale


@dataclass(frozen=True, slots=True)
class _Pieces:
    """How one input set's outputs are judged: per output, the flat indices of the elements where the
    judges' global quantities peak (max |ref|, max |ref64| (the scale) and max |ref - ref64| (the
    reference's own error)), a random sample that includes them, and whether the output is large
    enough to judge in pieces. Every piece includes the peaks, so the ``fp64-bound`` judge has on it
    exactly the bound it has on the whole tensor; ``allclose`` and the NaN checks are elementwise.
    Hence the whole passes if and only if every piece passes, and failing the sample means failing."""

    peaks: tuple[torch.Tensor | None, ...]
    sample: tuple[torch.Tensor | None, ...]


def _pieces(refs: list[Any], refs64: list[Any] | None) -> _Pieces:
    peaks: list[torch.Tensor | None] = []
    sample: list[torch.Tensor | None] = []
    gen = torch.Generator(device="cpu").manual_seed(0)
    for i, r in enumerate(refs):
        if not isinstance(r, torch.Tensor) or r.numel() <= 2 * _SUBSET or not r.is_floating_point():
            peaks.append(None)
            sample.append(None)
            continue
        flat = r.reshape(-1)
        picks = [_argmax_finite_abs(flat)]
        r64 = refs64[i] if refs64 is not None and i < len(refs64) else None
        if isinstance(r64, torch.Tensor) and r64.shape == r.shape:
            f64 = r64.reshape(-1)
            picks += [_argmax_finite_abs(f64), _argmax_error(flat, f64)]
        pk = torch.tensor(picks, dtype=torch.long, device=flat.device)
        peaks.append(pk)
        sample.append(torch.cat([torch.randint(0, flat.numel(), (_SUBSET,), generator=gen).to(flat.device), pk]))
    return _Pieces(tuple(peaks), tuple(sample))


def _take(x: Any, idx: torch.Tensor | None) -> Any:
    return x.reshape(-1)[idx] if (idx is not None and isinstance(x, torch.Tensor)) else x


def _judge(p: Protocol, outs: list[Any], refs: list[Any], refs64: list[Any] | None,
           pieces: _Pieces | None = None) -> bool:
    """The evaluator's own verdict (:func:`~.execution.verify.compare_outputs`) under ``p``'s settings,
    on a sample first, then on the whole (in pieces for large outputs; see :class:`_Pieces`)."""
    from .execution.verify import compare_outputs

    tol = p.tolerance
    r64 = refs64 if p.judge == "fp64-bound" else None

    def ok(o: list[Any], r: list[Any], r64_: list[Any] | None) -> bool:
        return compare_outputs(o, r, judge=p.judge, atol=tol.atol, rtol=tol.rtol, nan_policy=p.nan_policy,
                               check_dtype=p.check_dtype, refs64=r64_, fp64_multiple=p.fp64_multiple,
                               fp64_floor_rel=p.fp64_floor_rel).ok

    same_shapes = len(outs) == len(refs) and all(
        not isinstance(r, torch.Tensor) or (isinstance(o, torch.Tensor) and o.shape == r.shape)
        for o, r in zip(outs, refs))
    if pieces is None or not same_shapes or all(s is None for s in pieces.sample):
        return ok(outs, refs, r64)
    r64l = list(r64) if r64 is not None else None

    def sub(idx: list[torch.Tensor | None], which: list[int]) -> bool:
        return ok([_take(outs[i], idx[i]) for i in which], [_take(refs[i], idx[i]) for i in which],
                  None if r64l is None else [_take(r64l[i], idx[i]) for i in which])

    everything = list(range(len(refs)))
    if not sub(list(pieces.sample), everything):
        return False
    total = sum(r.numel() for r in refs if isinstance(r, torch.Tensor))
    if total <= _CHUNK:
        return ok(outs, refs, r64)
    small = [i for i in everything if pieces.peaks[i] is None]
    if small and not sub([None] * len(refs), small):
        return False
    for i in everything:
        pk = pieces.peaks[i]
        if pk is None:
            continue
        for a, b in _ranges(refs[i].numel()):
            idx = torch.cat([torch.arange(a, b, device=pk.device), pk])
            pad: list[torch.Tensor | None] = [None] * len(refs)
            pad[i] = idx
            if not sub(pad, [i]):
                return False
    return True


def _float_max_abs(refs: list[Any]) -> float | None:
    best: float | None = None
    for r in refs:
        if isinstance(r, torch.Tensor) and (r.is_floating_point() or r.is_complex()) and r.numel():
            m = float(_finite_abs(r).max())
            best = m if best is None else max(best, m)
    return best


def _fraction_at_most(refs: list[Any], limit: float) -> float | None:
    n = k = 0
    for r in refs:
        if isinstance(r, torch.Tensor) and r.is_floating_point() and r.numel():
            n += r.numel()
            k += int((r.abs() <= limit).sum())
    return k / n if n else None


def _constant_within(refs: list[Any]) -> list[int]:
    idx = []
    for i, r in enumerate(refs):
        if isinstance(r, torch.Tensor) and r.numel() > 1:
            flat = r.reshape(-1)
            if _same(flat, flat[:1].expand_as(flat)):
                idx.append(i)
    return idx


def _is_oom(e: BaseException) -> bool:
    text = str(e).lower()
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text \
        or "can't allocate memory" in text


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:2000]


class _Stop(Exception):
    """Ends one problem's audit early with a flag."""

    def __init__(self, flag: AuditFlag, evidence: dict[str, Any]) -> None:
        super().__init__(str(flag))
        self.flag = flag
        self.evidence = evidence


def _phase(name: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except _Stop:
        raise
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        if _is_oom(e):
            raise _Stop(AuditFlag.SKIPPED_SIZE, {"reason": "out of memory", "phase": name,
                                                 "error": _error_text(e)}) from None
        raise _Stop(AuditFlag.REFERENCE_ERROR, {"phase": name, "error": _error_text(e),
                                                "traceback": traceback.format_exc()[-3000:]}) from None


def _time_eager(model: Any, vals: list[Any], dev: torch.device, observed_ms: list[float]) -> tuple[float | None,
                                                                                                   dict[str, Any]]:
    """Eager time in ms: CUDA events with an L2 flush on a GPU (the evaluator's timing code), the
    median wall time of the calls already made (or a short wall-clock loop for fast ones) on the CPU."""
    from .execution import timing as _timing

    rough = statistics.median(observed_ms) if observed_ms else None
    if dev.type != "cuda" and rough is not None and rough > 50.0:
        return rough, {"timer": "wall", "n": len(observed_ms), "source": "audit calls"}
    n = 100 if rough is None or rough <= 0 else int(min(100, max(5, 100.0 / rough)))  # about 0.1 s
    flush = _timing.l2_flush_bytes_for(dev, "device", 256 << 20) if dev.type == "cuda" else 0
    settings = _timing.TimerSettings(timer="cuda_events" if dev.type == "cuda" else "wall", warmup=3, trials=n,
                                     adaptive=False, statistic="median", l2_flush_bytes=flush)

    def fn(_i: int) -> Any:
        with torch.no_grad():
            return model(*vals)

    stats, _ = _timing.time_callable(fn, dev, settings)
    return stats.median_ms, {"timer": stats.timer, "n": stats.n, "statistic": "median",
                             "ci95_ms": [stats.ci95_low_ms, stats.ci95_high_ms], "l2_flush_bytes": flush}


@contextlib.contextmanager
def _strict_fp32(dev: torch.device) -> Any:
    """TF32 off for matmul and cuDNN while auditing (strict fp32, as the ``kbench`` protocol states)."""
    if dev.type != "cuda":
        yield
        return
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def audit_problem(
    problem: Problem,
    *,
    device: str = "cpu",
    protocol: Protocol | Sequence[Protocol] | None = None,
    seeds: int = 3,
    max_elements: int | None = None,
    launch_bound_us: float = LAUNCH_BOUND_US,
    time_eager: bool = True,
) -> AuditReport:
    """Audit one problem in this process (see the module docstring for what is checked).

    Problem code runs here: use :func:`audit_problems` for a child process with a time limit.

    Args:
        problem: the problem.
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        protocol: the protocol(s) whose judges decide ``trivial-passes`` (None: ``kbench``,
            ``kernelbench`` and ``cuda-agent`` at fp32). Floating inputs and weights are cast to
            their precision (they must share one).
        seeds: input sets drawn (at least 2).
        max_elements: skip the problem (``skipped-size``) when its estimated size (forward inputs plus
            parameters and buffers, in elements) exceeds this; None: no limit.
        launch_bound_us: ``launch-bound`` threshold for the eager time, microseconds (GPU only).
        time_eager: measure the eager time.

    Returns:
        The :class:`AuditReport`. Failures of the problem's own code are flags, never exceptions.

    Raises:
        ConfigError: ``seeds < 2`` or protocols of different precisions.
    """
    if seeds < 2:
        raise ConfigError(f"the audit needs at least 2 input sets, got {seeds}", fix="use --seeds 2 or more")
    protos = _resolve_protocols(protocol)
    dev = torch.device(device if device != "cuda" else "cuda:0")
    t0 = time.perf_counter()
    flags: dict[AuditFlag, dict[str, Any]] = {}
    info: dict[str, Any] = {"protocols": [p.name for p in protos], "precision": protos[0].precision}
    eager_ms: float | None = None
    with _strict_fp32(dev):
        try:
            eager_ms = _audit_body(problem, dev, protos, seeds, max_elements, launch_bound_us, time_eager, flags,
                                   info)
        except _Stop as s:
            flags[s.flag] = s.evidence
        except Exception as e:  # noqa: BLE001 - the audit's own steps on this problem's tensors
            if _is_oom(e):
                flags[AuditFlag.SKIPPED_SIZE] = {"reason": "out of memory", "phase": "audit", "error": _error_text(e)}
            else:
                flags[AuditFlag.REFERENCE_ERROR] = {"phase": "audit", "error": _error_text(e),
                                                    "traceback": traceback.format_exc()[-3000:]}
        finally:
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    order = list(AuditFlag)
    ordered = sorted(flags, key=order.index)
    return AuditReport(key=problem.key, level=problem.level, problem_id=problem.problem_id, name=problem.name,
                       code_sha256=problem.code_sha256, flags=tuple(ordered),
                       evidence={str(f): flags[f] for f in ordered}, eager_ms=eager_ms, device=str(dev),
                       seconds=time.perf_counter() - t0, info=info)


def _audit_body(problem: Problem, dev: torch.device, protos: list[Protocol], n_sets: int, max_elements: int | None,
                launch_bound_us: float, time_eager: bool, flags: dict[AuditFlag, dict[str, Any]],
                info: dict[str, Any]) -> float | None:
    dtype = _DTYPE[protos[0].precision]
    mod = _phase("load", lambda: _exec_problem(problem))
    try:
        est: int | None = _elements_of(mod)
    except Exception as e:  # noqa: BLE001 - problem code on meta tensors
        est = None
        info["elements_error"] = _error_text(e)[:300]
    info["elements"] = est
    if max_elements is not None and est is not None and est > max_elements:
        raise _Stop(AuditFlag.SKIPPED_SIZE, {"reason": "size", "elements": est, "max_elements": max_elements})

    init = _phase("init_inputs", lambda: list(mod.get_init_inputs()))

    def build() -> Any:
        torch.manual_seed(_KB_SEED)
        with _device_ctx(dev):
            m = mod.Model(*init)
        if isinstance(m, torch.nn.Module):
            m = m.to(dev)
            if dtype != torch.float32:
                m = m.to(dtype)
        return m

    model = _phase("construct", build)
    seeds = kernelbench_trial_seeds(n_sets)
    info["seeds"] = {"scheme": "kernelbench: manual_seed(42), then randint per set", "values": seeds,
                     "weights_seed": _KB_SEED, "drawn_on": str(dev)}

    def draw(s: int) -> list[Any]:
        torch.manual_seed(s)
        with _device_ctx(dev):
            vals = list(mod.get_inputs())
        return _to_device(vals, dev, dtype)

    judges64 = [p for p in protos if p.judge == "fp64-bound"]
    model64: list[Any] = []  # built lazily, once
    fp64_info: dict[str, Any] = {"sets": 0}

    cache64: dict[int, list[Any] | None] = {}

    def ref64(vals: list[Any], set_idx: int) -> list[Any] | None:
        if set_idx in cache64:
            return cache64[set_idx]
        cache64.clear()  # keep at most one set's float64 outputs
        cache64[set_idx] = _ref64(vals)
        return cache64[set_idx]

    def _ref64(vals: list[Any]) -> list[Any] | None:
        if "error" in fp64_info:
            return None
        try:
            if not model64:
                m64 = copy.deepcopy(model)
                model64.append(m64.double() if isinstance(m64, torch.nn.Module) else m64)
            args = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in vals]
            outs, _ = _forward(model64[0], args, dev)
            fp64_info["sets"] += 1
            return outs
        except Exception as e:  # noqa: BLE001 - float64 is best effort: judged by allclose without it
            fp64_info["error"] = _error_text(e)[:500]
            model64.clear()
            return None

    # set 0: reference twice on the same inputs, watching the random-number generators
    vals0 = _phase("get_inputs", lambda: draw(seeds[0]))
    tensor_inputs = [i for i, v in enumerate(vals0) if isinstance(v, torch.Tensor)]
    rng_before = _rng_states(dev)
    refs0, _ = _phase("forward", lambda: _forward(model, vals0, dev))
    rng_after = _rng_states(dev)
    again, ms1 = _phase("forward", lambda: _forward(model, vals0, dev))
    observed_ms = [ms1]
    consumes_rng = not all(torch.equal(a, b) for a, b in zip(rng_before, rng_after))
    outputs_differ = not _all_same(refs0, again)
    info["outputs"] = [{"shape": list(r.shape), "dtype": str(r.dtype).replace("torch.", "")}
                       if isinstance(r, torch.Tensor) else {"value": repr(r)[:80]} for r in refs0]
    stochastic = _stochastic_modules(model)
    if consumes_rng or outputs_differ:
        selfcheck = {}
        r64_0 = ref64(vals0, 0) if judges64 else None
        pieces0 = _pieces(refs0, r64_0)
        for p in protos:
            selfcheck[p.name] = _judge(p, again, refs0, r64_0, pieces0)
        flags[AuditFlag.NONDETERMINISTIC] = {
            "outputs_differ": outputs_differ, "max_abs_diff": _max_abs_diff(refs0, again),
            "consumes_rng": consumes_rng, "stochastic_modules": stochastic,
            "reference_rerun_passes": selfcheck}
    del again

    # integer inputs: kept as they are; what would casting them to float do?
    ints = [i for i in tensor_inputs if not (vals0[i].is_floating_point() or vals0[i].is_complex())]
    if ints:
        ev: dict[str, Any] = {"inputs": [{"index": i, "dtype": str(vals0[i].dtype).replace("torch.", ""),
                                          "shape": list(vals0[i].shape),
                                          "min": int(vals0[i].min()) if vals0[i].numel() else None,
                                          "max": int(vals0[i].max()) if vals0[i].numel() else None}
                                         for i in ints]}
        cast = [v.to(dtype) if isinstance(v, torch.Tensor) else v for v in vals0]
        try:
            outs_cast, _ = _forward(model, cast, dev)
            d = _max_abs_diff(outs_cast, refs0) if len(outs_cast) == len(refs0) else None
            same_shapes = len(outs_cast) == len(refs0) and all(
                getattr(a, "shape", None) == getattr(b, "shape", None) for a, b in zip(outs_cast, refs0))
            ev["float_cast"] = {"error": None, "same_shapes": same_shapes, "max_abs_diff": d,
                                "changes_output": (not same_shapes) or bool(d) if not outputs_differ else None}
        except Exception as e:  # noqa: BLE001 - problem code given cast inputs
            ev["float_cast"] = {"error": _error_text(e)[:500], "changes_output": True}
        del cast
        flags[AuditFlag.INT_INPUTS] = ev

    # trivial candidates, judged per set with each protocol's judge
    means = _means(refs0)
    alive: dict[str, dict[str, bool | None]] = {k: {p.name: True for p in protos} for k in TRIVIAL_KINDS}
    max_abs: float | None = _float_max_abs(refs0)
    frac = {name: _fraction_at_most(refs0, tol) for name, tol in _SMALL_TOLERANCES.items()}
    identical_outputs = True
    identical_inputs = {i: True for i in tensor_inputs}
    const_idx = set(_constant_within(refs0))

    def judge_set(vals: list[Any], refs: list[Any], set_idx: int) -> None:
        need64 = any(alive[k][p.name] for k in TRIVIAL_KINDS for p in judges64)
        r64 = ref64(vals, set_idx) if (judges64 and (need64 or set_idx == 0)) else None
        pieces = _pieces(refs, r64)
        by_fill: dict[tuple[float, ...], dict[str, bool]] = {}  # constant candidates with equal values
        for kind in TRIVIAL_KINDS:
            outs = _trivial_outputs(kind, refs, vals, means)
            fill = _fill_key(kind, means)
            known = by_fill.setdefault(fill, {}) if fill is not None else {}
            for p in protos:
                if outs is None:
                    alive[kind][p.name] = None
                elif alive[kind][p.name]:
                    if p.name not in known:
                        known[p.name] = _judge(p, outs, refs, r64, pieces)
                    alive[kind][p.name] = known[p.name]
            del outs

    _phase("judge", lambda: judge_set(vals0, refs0, 0))
    r64_0 = cache64.get(0)
    if r64_0 is not None:
        e_ref, scale = _reference_error(refs0, r64_0)
        info.setdefault("fp64", {}).update(set0_ref_error=e_ref, set0_scale=scale)
        if scale > 0 and e_ref > ILL_CONDITIONED_REL * scale and AuditFlag.NONDETERMINISTIC not in flags:
            flags[AuditFlag.ILL_CONDITIONED] = {"ref_error": e_ref, "max_abs_fp64_output": scale,
                                                "relative": e_ref / scale, "threshold": ILL_CONDITIONED_REL}
    for set_idx, s in enumerate(seeds[1:], start=1):
        vals = _phase("get_inputs", lambda s=s: draw(s))
        refs, ms = _phase("forward", lambda vals=vals: _forward(model, vals, dev))
        observed_ms.append(ms)
        for i in tensor_inputs:
            identical_inputs[i] = identical_inputs[i] and i < len(vals) and _same(vals[i], vals0[i])
        identical_outputs = identical_outputs and _all_same(refs, refs0)
        const_idx &= set(_constant_within(refs))
        m = _float_max_abs(refs)
        if m is not None:
            max_abs = m if max_abs is None else max(max_abs, m)
        for name, tol in _SMALL_TOLERANCES.items():
            f = _fraction_at_most(refs, tol)
            if f is not None and frac[name] is not None:
                frac[name] = min(frac[name], f)  # type: ignore[type-var]
        _phase("judge", lambda vals=vals, refs=refs, k=set_idx: judge_set(vals, refs, k))
        del vals, refs
    info["fp64"] = {**info.get("fp64", {}), **fp64_info}
    info["max_abs_output"] = max_abs
    info["trivial"] = alive

    inputs_vary = any(not same for same in identical_inputs.values())
    if not tensor_inputs or not inputs_vary:
        flags[AuditFlag.SEED_INDEPENDENT] = {
            "tensor_inputs": len(tensor_inputs),
            "identical_inputs": [i for i, same in identical_inputs.items() if same], "sets": n_sets}
    if (identical_outputs and inputs_vary and not outputs_differ) or const_idx:
        ev = {"identical_across_input_sets": bool(identical_outputs and inputs_vary),
              "constant_outputs": sorted(const_idx), "sets": n_sets}
        if const_idx:
            r = refs0[min(const_idx)]
            ev["value"] = float(r.reshape(-1)[0].double()) if isinstance(r, torch.Tensor) else None
        flags[AuditFlag.DEGENERATE_CONSTANT] = ev
    if max_abs is not None:
        below = {name: max_abs <= tol / (1.0 - tol) for name, tol in _SMALL_TOLERANCES.items()}
        if below["1e-2"]:
            flags[AuditFlag.DEGENERATE_SMALL] = {
                "max_abs_output": max_abs, "zeros_pass_allclose": below,
                "fraction_at_most": frac, "zeros_pass": {p.name: alive["zeros"][p.name] for p in protos}}
    for kind in TRIVIAL_KINDS:
        passing = {p: v for p, v in alive[kind].items() if v}
        if passing:
            flags[AuditFlag.trivial(kind)] = {"protocols": alive[kind], "sets": n_sets,
                                              **({"constant": means} if kind == "mean" else {})}

    eager_ms: float | None = None
    if time_eager:
        try:
            eager_ms, tinfo = _time_eager(model, vals0, dev, observed_ms)
            info["timing"] = tinfo
        except Exception as e:  # noqa: BLE001 - timing is best effort: the flags above stand
            info["timing"] = {"error": _error_text(e)[:500]}
        if eager_ms is not None and dev.type == "cuda" and eager_ms * 1e3 < launch_bound_us:
            flags[AuditFlag.LAUNCH_BOUND] = {"eager_ms": eager_ms, "threshold_us": launch_bound_us,
                                             "timer": info.get("timing", {}).get("timer")}
    model64.clear()
    cache64.clear()
    return eager_ms


# -- many problems, each in a child process ---------------------------------------------------------


def _default_memory_limit() -> int | None:
    """Half of this host's physical memory (bytes), or None when unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return None


def _worker_main(conn: Any, device: str, log_path: str, memory_limit_bytes: int | None = None,
                 threads: int | None = None) -> None:
    """Child process: audits problems sent over ``conn`` until told to stop.

    On the CPU its address space is capped at ``memory_limit_bytes``, so a problem too large for the
    host fails an allocation (``skipped-size``) instead of waking the kernel's out-of-memory killer.
    """
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    if memory_limit_bytes and not device.startswith("cuda"):
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    if threads:
        torch.set_num_threads(threads)
    import warnings

    warnings.simplefilter("ignore")
    env: dict[str, Any] = {"torch": torch.__version__, "device": device, "pid": os.getpid()}
    try:
        if device.startswith("cuda"):
            d = torch.device(device if device != "cuda" else "cuda:0")
            torch.cuda.set_device(d)
            env.update({"device_name": torch.cuda.get_device_name(d), "cuda": torch.version.cuda})
    except Exception as e:  # noqa: BLE001 - reported to the parent, which gives up on the device
        conn.send(("error", _error_text(e)))
        return
    conn.send(("ready", env))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "stop":
            return
        try:
            if msg[0] == "audit":
                problem = Problem.from_dict(msg[1])
                conn.send(("ok", audit_problem(problem, device=device, **msg[2]).to_dict()))
            elif msg[0] == "estimate":
                conn.send(("ok", [estimate_elements(Problem.from_dict(d)) for d in msg[1]]))
            else:
                conn.send(("error", f"unknown request {msg[0]!r}"))
        except Exception as e:  # noqa: BLE001 - a harness bug: this problem's error
            conn.send(("error", _error_text(e) + "\n" + traceback.format_exc()[-2000:]))


class _Worker:
    def __init__(self, device: str, log_path: str, memory_limit_bytes: int | None, threads: int | None) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, device, log_path, memory_limit_bytes, threads),
                                daemon=True, name="kbench-audit")
        self.proc.start()
        child.close()
        self.log_path = log_path
        self.env: dict[str, Any] = {}

    def wait_ready(self, timeout_s: float) -> bool:
        if not self.conn.poll(max(0.0, timeout_s)):
            return False
        try:
            tag, payload = self.conn.recv()
        except (EOFError, OSError):
            return False
        if tag != "ready":
            raise ConfigError(f"the audit worker could not start on this device: {payload}")
        self.env = payload
        return True

    def request(self, msg: tuple[Any, ...], timeout_s: float) -> tuple[str, Any]:
        """``("ok", payload)``, ``("error", text)``, ``("timeout", None)`` or ``("died", exit code)``."""
        try:
            self.conn.send(msg)
            if not self.conn.poll(max(0.0, timeout_s)):
                return ("timeout", None)
            return self.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            self.proc.join(timeout=5)
            return ("died", self.proc.exitcode)

    def log_tail(self, n: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
            self.proc.join(timeout=10)
        except (OSError, BrokenPipeError):
            pass
        self.kill()


def _stub(problem: Problem, flag: AuditFlag, evidence: dict[str, Any], device: str, seconds: float = 0.0,
          info: dict[str, Any] | None = None) -> AuditReport:
    return AuditReport(key=problem.key, level=problem.level, problem_id=problem.problem_id, name=problem.name,
                       code_sha256=problem.code_sha256, flags=(flag,), evidence={str(flag): evidence},
                       device=device, seconds=seconds, info=dict(info or {}))


def audit_problems(
    problems: Sequence[Problem],
    *,
    device: str = "cpu",
    protocol: Protocol | Sequence[Protocol] | None = None,
    seeds: int = 3,
    max_elements: int | None = None,
    launch_bound_us: float = LAUNCH_BOUND_US,
    timeout_s: float = 300.0,
    budget_s: float | None = None,
    order: str = "given",
    first: Iterable[str] = (),
    on_report: Callable[[AuditReport], None] | None = None,
    environment: dict[str, Any] | None = None,
    memory_limit_bytes: int | None = -1,
    threads: int | None = None,
) -> list[AuditReport]:
    """Audit ``problems``, each in a child process with a time limit.

    One worker process audits the problems one after another; a problem that runs past its limit or
    crashes the worker is recorded (``skipped-time``, or ``reference-error`` with the exit code and
    the log's tail; a worker killed by SIGKILL, usually the kernel's out-of-memory killer, gives
    ``skipped-size``) and a fresh worker takes the next problem.

    Args:
        problems: the problems.
        device, protocol, seeds, max_elements, launch_bound_us: as for :func:`audit_problem`.
        timeout_s: time limit per problem (s), worker start excluded.
        budget_s: time budget for the whole audit (s), worker starts and size estimates included;
            problems not reached are recorded as ``skipped-time`` (reason ``budget``). None: no budget.
        order: ``given``, or ``size``: smallest estimated size first, unknown sizes last.
        first: problem keys audited before all others (in the given order), e.g. known defects.
        on_report: called with each report as soon as it is made (progress display).
        environment: filled with the worker's environment (torch version, device name), if given.
        memory_limit_bytes: address-space cap of the worker on the CPU (-1: half the host's memory;
            None: no cap). Not applied on a GPU.
        threads: intra-op threads of the worker (None: torch's default). One thread is much faster on
            a small, busy CPU, where every parallel region waits for a descheduled thread.

    Returns:
        One report per problem, in the order of ``problems``.

    Raises:
        ConfigError: bad ``order``, ``seeds`` or protocols, or a worker that cannot use the device.
    """
    if order not in ("given", "size"):
        raise ConfigError(f"unknown audit order {order!r}", fix="use 'given' or 'size'")
    if seeds < 2:
        raise ConfigError(f"the audit needs at least 2 input sets, got {seeds}", fix="use --seeds 2 or more")
    protos = _resolve_protocols(protocol)
    mem_limit = _default_memory_limit() if memory_limit_bytes == -1 else memory_limit_bytes
    t_start = time.monotonic()
    deadline = t_start + budget_s if budget_s is not None else math.inf
    opts = {"protocol": protos, "seeds": seeds, "max_elements": max_elements, "launch_bound_us": launch_bound_us}
    plist = list(problems)
    reports: dict[int, AuditReport] = {}
    logdir = Path(tempfile.mkdtemp(prefix="kbench_audit_"))
    n_workers = 0
    worker: _Worker | None = None

    def emit(i: int, r: AuditReport) -> None:
        reports[i] = r
        if on_report is not None:
            on_report(r)

    def start() -> _Worker | None:
        nonlocal n_workers
        n_workers += 1
        w = _Worker(device, str(logdir / f"worker{n_workers}.log"), mem_limit, threads)
        if not w.wait_ready(min(300.0, deadline - time.monotonic())):
            w.kill()
            return None
        if environment is not None and not environment:
            environment.update(w.env)
        return w

    try:
        todo = list(range(len(plist)))
        if plist and (order == "size" or first):
            worker = start()
            sizes: list[int | None] = [None] * len(plist)
            if worker is not None and order == "size":
                limit = min(max(60.0, 0.5 * len(plist)), (deadline - time.monotonic()) / 4)
                tag, payload = worker.request(("estimate", [p.to_dict() for p in plist]), limit)
                if tag == "ok":
                    sizes = list(payload)
                else:
                    log.warning("no size estimates (%s); auditing in the given order", tag)
                    worker.kill()
                    worker = None
                todo.sort(key=lambda i: (sizes[i] is None, sizes[i] or 0))
            pri = {k: n for n, k in enumerate(first)}
            todo.sort(key=lambda i: pri.get(plist[i].key, len(pri)))
        for i in todo:
            p = plist[i]
            remaining = deadline - time.monotonic()
            if remaining < 1.0:
                emit(i, _stub(p, AuditFlag.SKIPPED_TIME, {"reason": "budget", "budget_s": budget_s}, device))
                continue
            if worker is None:
                worker = start()
                if worker is None:
                    emit(i, _stub(p, AuditFlag.SKIPPED_TIME, {"reason": "budget", "budget_s": budget_s}, device))
                    continue
            limit = min(timeout_s, deadline - time.monotonic())
            t0 = time.monotonic()
            tag, payload = worker.request(("audit", p.to_dict(), opts), limit)
            dt = time.monotonic() - t0
            if tag == "ok":
                try:
                    emit(i, AuditReport.from_dict(payload))
                except (KeyError, TypeError, ValueError) as e:  # a worker from another kbench version
                    emit(i, _stub(p, AuditFlag.REFERENCE_ERROR, {"phase": "harness",
                                                                 "error": f"unreadable report: {e}"}, device, dt))
                continue
            if tag == "timeout":
                reason = "time limit" if limit >= timeout_s else "budget"
                emit(i, _stub(p, AuditFlag.SKIPPED_TIME, {"reason": reason, "limit_s": round(limit, 1)}, device, dt))
                worker.kill()
                worker = None
            elif tag == "died":
                code = payload
                tail = worker.log_tail()
                if code == -9:
                    emit(i, _stub(p, AuditFlag.SKIPPED_SIZE, {"reason": "killed by SIGKILL (out of memory?)",
                                                              "exit_code": code, "log_tail": tail}, device, dt))
                else:
                    emit(i, _stub(p, AuditFlag.REFERENCE_ERROR, {"phase": "process", "exit_code": code,
                                                                 "error": f"the audit process died (exit code "
                                                                          f"{code})", "log_tail": tail},
                                  device, dt))
                worker.kill()
                worker = None
            else:
                emit(i, _stub(p, AuditFlag.REFERENCE_ERROR, {"phase": "harness", "error": str(payload)[:3000]},
                              device, dt))
    finally:
        if worker is not None:
            worker.stop()
        for f in logdir.glob("*.log"):
            f.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            logdir.rmdir()
    return [reports[i] for i in range(len(plist))]


# -- summaries ---------------------------------------------------------------------------------------


def flag_counts(reports: Iterable[AuditReport]) -> dict[str, int]:
    """Number of problems per flag, in :class:`AuditFlag` order (flags never raised are left out)."""
    counts = {str(f): 0 for f in AuditFlag}
    for r in reports:
        for f in r.flags:
            counts[str(f)] += 1
    return {k: v for k, v in counts.items() if v}


def known_defect_status(reports: Iterable[AuditReport],
                        defects: Sequence[KnownDefect] = KNOWN_DEFECTS) -> list[dict[str, Any]]:
    """Whether the audit caught each known defect of KernelBench main (PROTOCOLS.md section 5).

    Returns:
        One dict per defect: ``key``, ``description``, ``expected`` (flags), ``status`` (``caught``,
        ``missed``, ``not-audited`` with the reason flags, or ``absent`` when the problem set has no
        problem of that key and name), ``flags`` (all the problem's flags).
    """
    by_key = {r.key: r for r in reports}
    out = []
    for d in defects:
        r = by_key.get(d.key)
        row: dict[str, Any] = {"key": d.key, "name": d.name, "description": d.description, "expected": list(d.flags)}
        if r is None or r.name != d.name:
            row.update(status="absent", flags=[])
        elif any(r.has(f) for f in d.flags):
            row.update(status="caught", flags=[str(f) for f in r.flags])
        elif not r.audited:
            row.update(status="not-audited", flags=[str(f) for f in r.flags])
        else:
            row.update(status="missed", flags=[str(f) for f in r.flags])
        out.append(row)
    return out


def run_flags(reports: Iterable[AuditReport], protocol_name: str | None = None) -> dict[str, list[str]]:
    """Flags to store on a run (``Store.set_problem_flags``): each problem's audit flags, plus
    :data:`DEGENERATE` (which reports score apart) when its scores under the run's protocol mean
    nothing: the output is constant, or a trivial candidate passes under ``protocol_name`` (under any
    audited protocol when ``protocol_name`` is None or was not audited).

    Returns:
        Problem key -> sorted flags, for every report (an empty list clears stored flags).
    """
    out: dict[str, list[str]] = {}
    for r in reports:
        fl = {str(f) for f in r.flags}
        audited_protocols = set(r.info.get("protocols") or ())
        if protocol_name is not None and protocol_name in audited_protocols:
            trivial = bool(r.trivial_passes(protocol_name))
        else:
            trivial = any(f.startswith("trivial-passes:") for f in fl)
        if AuditFlag.DEGENERATE_CONSTANT in fl or trivial:
            fl.add(DEGENERATE)
        out[r.key] = sorted(fl)
    return out


def audit_to_json(reports: Sequence[AuditReport], *, settings: Mapping[str, Any] | None = None,
                  environment: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The audit as one JSON-ready dict: ``schema_version``, ``kind`` (``kbench.audit``), ``settings``,
    ``environment``, ``counts`` (:func:`flag_counts`), ``known_defects`` (:func:`known_defect_status`)
    and ``reports``."""
    return {"schema_version": SCHEMA_VERSION, "kind": "kbench.audit",
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "settings": _jsonable(dict(settings or {})), "environment": _jsonable(dict(environment or {})),
            "counts": flag_counts(reports), "known_defects": known_defect_status(reports),
            "reports": [r.to_dict() for r in reports]}


def load_audit_json(path: str | os.PathLike[str]) -> list[AuditReport]:
    """Reports from a file written with :func:`audit_to_json`.

    Raises:
        ConfigError: not such a file.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("kind") != "kbench.audit":
            raise ValueError("not a kbench audit file")
        return [AuditReport.from_dict(d) for d in data["reports"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"cannot read the audit file {path}: {e}",
                          fix="pass a file written by `kbench problems audit --out`") from None


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if isinstance(x, Protocol):
        return x.name
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _jsonable(dataclasses.asdict(x))
    return repr(x)
