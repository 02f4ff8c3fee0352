"""Output comparison, on the trusted side only.

Two judges (``Protocol.judge``):

- ``allclose`` (KernelBench, CUDA Agent): shapes equal, then ``torch.allclose(out, ref, atol, rtol)``
  elementwise ``|out - ref| <= atol + rtol * |ref|`` at the protocol's tolerance for the precision.
  Under ``nan_policy="fail"`` any NaN in the output fails (KernelBench).
- ``fp64-bound`` (kbench): the reference is also evaluated in float64 (inputs and weights upcast).
  With ``e_ref = max |ref - ref64|`` (the PyTorch reference's own error at the run's precision),
  the candidate passes when every element satisfies
  ``|out - ref64| <= k * e_ref + floor_rel * max|ref64|`` (``k = Protocol.fp64_multiple``,
  ``floor_rel = Protocol.fp64_floor_rel``). An honest fp32 kernel that sums in another order stays
  within a small multiple of PyTorch's own error; a wrong kernel, or one that computes in lower
  precision, does not. NaN/Inf must sit exactly where the float64 reference has them.

Integer and boolean outputs must match exactly under both judges.

Memory: outputs can be large (1.6e9 float32 elements in some KernelBench level-1 problems), so
each output is compared in chunks of at most ``chunk_elems`` consecutive elements of its row-major
order, and the float64 temporaries are the size of a chunk, not of the output. A first pass over
the chunks gathers what the second needs (``max|judge_ref|``, for the relative error's floor, and
under ``fp64-bound`` the reference's own error, for the bound) together with the allclose and
NaN/Inf checks; the second pass measures the candidate's errors. Maxima and counts over the chunks
equal those over the whole tensor exactly, so no result depends on the chunk size.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

import torch

from . import fusedjudge

_T = TypeVar("_T")

__all__ = ["Comparison", "compare_outputs", "extra_check_verdict", "flatten_outputs", "lower_precision_bound_ok"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """Result of comparing one candidate output with the reference.

    Attributes:
        ok: passed the protocol's judge.
        reason: "" when ok, else ``shape``, ``dtype``, ``nan``, ``tolerance``, ``structure``, ``type``.
        max_abs_err: max |out - judge_ref| over finite elements (None if not compared).
        max_rel_err: max |out - judge_ref| / max(|judge_ref|, floor) elementwise, floor = 1e-6 * max|judge_ref|.
        allclose_kernelbench: KernelBench-style allclose against the run-precision reference.
        bound: the fp64-bound judge's bound ``k * e_ref + floor_rel * max|ref64|`` (the largest over the
            outputs; None for allclose).
        ref_err: ``e_ref``, the PyTorch reference's own error against float64 (None without float64).
        mismatches: number of elements outside the bound / tolerance.
        detail: human-readable summary.
    """

    ok: bool
    reason: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    allclose_kernelbench: bool | None = None
    bound: float | None = None
    ref_err: float | None = None
    mismatches: int = 0
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def flatten_outputs(x: Any) -> list[Any]:
    """A model's output as a flat list (a tensor, or nested tuples/lists of tensors and numbers)."""
    if isinstance(x, (list, tuple)):
        out: list[Any] = []
        for y in x:
            out.extend(flatten_outputs(y))
        return out
    return [x]


def _blocks(shape: torch.Size, chunk_elems: int) -> Iterator[tuple[int | slice, ...]]:
    """Indices that cut a tensor of ``shape`` into consecutive blocks of its row-major order, each
    of at most ``chunk_elems`` (>= 1) elements: groups of whole rows along dim 0, and when one row
    alone is larger than a chunk, each row cut the same way along the next dim.

    Indexing with them gives views whatever the strides; a block of a contiguous tensor is itself
    contiguous, so flattening it copies nothing. The blocks depend on the shape only, so tensors of
    one shape are cut at the same elements. A tensor of no more than ``chunk_elems`` elements (a
    zero-element tensor among them) is one block, ``()``.
    """
    numel = math.prod(shape)
    if numel <= chunk_elems:
        yield ()
        return
    row = numel // shape[0]  # numel > chunk_elems >= 1: at least one dim, none of size 0
    if row <= chunk_elems:
        step = chunk_elems // row
        for start in range(0, shape[0], step):
            yield (slice(start, start + step),)
    else:
        for k in range(shape[0]):
            for rest in _blocks(shape[1:], chunk_elems):
                yield (k, *rest)


def _chunks(tensors: Sequence[torch.Tensor], device: torch.device,
            chunk_elems: int) -> Iterator[tuple[torch.Tensor, ...]]:
    """The same blocks (:func:`_blocks`) of tensors of one shape, each flattened and on ``device``.

    Only a block is ever copied: flattening a block of a non-contiguous tensor (a transposed output,
    say) copies that block, and a block on another device is moved alone. A tensor given twice (the
    reference as its own judge) is cut once.
    """
    for idx in _blocks(tensors[0].shape, chunk_elems):
        blocks: dict[int, torch.Tensor] = {}
        for t in tensors:
            if id(t) not in blocks:
                blocks[id(t)] = t[idx].reshape(-1).to(device)
        yield tuple(blocks[id(t)] for t in tensors)


def _max_nan(acc: float, x: float) -> float:
    """``max(acc, x)`` that stays NaN once either is NaN, as ``torch.max`` over all the chunks would."""
    return x if math.isnan(x) or x > acc else acc


def _finite_abs(t64: torch.Tensor) -> torch.Tensor:
    """|t64| where finite, 0 elsewhere (float64)."""
    return torch.where(torch.isfinite(t64), t64.abs(), 0.0)


def _abs_err(o64: torch.Tensor, r64: torch.Tensor) -> torch.Tensor:
    """|o64 - r64| where both are finite, 0 elsewhere (float64, elementwise)."""
    return torch.where(torch.isfinite(r64) & torch.isfinite(o64), (o64 - r64).abs(), 0.0)


def _allclose(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> bool:
    if out.shape != ref.shape:
        return False
    try:
        return bool(torch.allclose(out, ref.to(out.dtype) if out.dtype != ref.dtype else ref, atol=atol, rtol=rtol))
    except RuntimeError:
        return bool(torch.allclose(out.double(), ref.double(), atol=atol, rtol=rtol))


@dataclass(slots=True)
class _FirstPass:
    """What the first pass over one floating output's chunks gathers (see :func:`_first_pass`)."""

    allclose: bool = True  # torch.allclose(out, ref) over every chunk (the KernelBench check)
    nan_count: int = 0  # NaN elements of the output (nan_policy "fail")
    nonfinite_moved: int = 0  # elements non-finite in exactly one of output and judge_ref ("match")
    nonfinite_same: bool = True  # where both are non-finite, the same NaN/+Inf/-Inf ("match")
    scale: float = 0.0  # max |judge_ref| over its finite elements, in float64
    bound_scale: float = 0.0  # the same in judge_ref's own dtype (the bound's; fp64-bound only)
    ref_err: float = 0.0  # max |ref - judge_ref| over elements finite in both (fp64-bound only)

    def add(self, oc: torch.Tensor, rc: torch.Tensor, jc: torch.Tensor, *, atol: float, rtol: float,
            nan_policy: str, use64: bool) -> None:
        """Take in one chunk (flat, equal lengths) of the output, the reference and the judge's reference."""
        if self.allclose:
            self.allclose = _allclose(oc, rc, atol, rtol)
        if nan_policy == "fail":
            self.nan_count += int(torch.isnan(oc).sum())
        elif nan_policy == "match":
            o_bad, j_bad = ~torch.isfinite(oc), ~torch.isfinite(jc)
            moved = int((o_bad != j_bad).sum())
            self.nonfinite_moved += moved
            if not moved and self.nonfinite_same:  # the positions agree: compare the values there
                self.nonfinite_same = torch.equal(oc[o_bad].double().nan_to_num(),
                                                  jc[j_bad].double().nan_to_num())
        if not jc.numel():
            return  # a zero-element output: every maximum stays 0
        j64 = jc.to(torch.float64)
        self.scale = max(self.scale, float(_finite_abs(j64).max()))
        if use64:
            # |judge_ref| in its own dtype: equal to the float64 value above except for complex
            # outputs, whose float64 cast keeps the real part only
            self.bound_scale = max(self.bound_scale, float(jc.abs().nan_to_num(0, 0, 0).max()))
            self.ref_err = max(self.ref_err, float(_abs_err(rc.to(torch.float64), j64).max()))


def _first_pass(o: torch.Tensor, r: torch.Tensor, judge_ref: torch.Tensor, device: torch.device, *,
                atol: float, rtol: float, nan_policy: str, use64: bool, chunk_elems: int) -> _FirstPass:
    """The checks and maxima of one floating output that need no value over the whole output.

    ``o``, ``r`` and ``judge_ref`` share one shape; ``judge_ref`` is ``r`` itself or its float64
    twin (``use64``). Chunks are compared on ``device``.
    """
    fp = _FirstPass()
    for oc, rc, jc in _chunks((o, r, judge_ref), device, chunk_elems):
        fp.add(oc, rc, jc, atol=atol, rtol=rtol, nan_policy=nan_policy, use64=use64)
    return fp


def _fused_first_pass(o: torch.Tensor, r: torch.Tensor, judge_ref: torch.Tensor, *, atol: float, rtol: float,
                      nan_policy: str, chunk_elems: int) -> _FirstPass | None:
    """:func:`_first_pass` for a large output under ``fp64-bound`` in one fused read (:mod:`.fusedjudge`),
    with ``torch.allclose`` over the chunks of ``o`` and ``r`` beside it (the KernelBench check); None
    where the kernel failed (:func:`_run_fused`)."""
    got = _run_fused(lambda: fusedjudge.first_pass(o, r, judge_ref))
    if got is None:
        return None
    fp = _FirstPass()
    for oc, rc in _chunks((o, r), r.device, chunk_elems):
        if not _allclose(oc, rc, atol, rtol):
            fp.allclose = False
            break
    if nan_policy == "fail":
        fp.nan_count = got["nan_count"]
    elif nan_policy == "match":
        fp.nonfinite_moved = got["nonfinite_moved"]
        fp.nonfinite_same = got["nonfinite_other_kind"] == 0
    fp.scale = fp.bound_scale = got["scale"]  # real outputs: |judge_ref| in float64 is its own dtype's
    fp.ref_err = got["ref_err"]
    return fp


#: take the fused passes on the CPU too (Triton's interpreter; tests only)
_FUSED_ON_CPU = False


def _chunk_errors(oc: torch.Tensor, jc: torch.Tensor, *, floor: float, bound: float | None, atol: float,
                  rtol: float, nan_policy: str) -> tuple[float, float, int]:
    """:func:`_errors` of one non-empty chunk (flat, equal lengths)."""
    o64, j64 = oc.to(torch.float64), jc.to(torch.float64)
    d = _abs_err(o64, j64)
    max_abs = float(d.max())  # d >= 0 and never NaN
    max_rel = float((d / j64.abs().clamp_min(floor)).max())  # NaN where judge_ref has a NaN
    if bound is not None:
        return max_abs, max_rel, int((d > bound).sum())
    # torch.allclose semantics (equal_nan=False): a non-finite reference element matches only the
    # same infinity; NaN never matches; a non-finite output never matches a finite reference
    within = (d <= atol + rtol * j64.abs()) & torch.isfinite(o64)
    same_inf = torch.isinf(j64) & (o64 == j64)
    if nan_policy == "match":  # NaN where the reference has NaN is a match under this policy
        same_inf = same_inf | (torch.isnan(j64) & torch.isnan(o64))
    return max_abs, max_rel, int((~torch.where(torch.isfinite(j64), within, same_inf)).sum())


def _errors(o: torch.Tensor, judge_ref: torch.Tensor, device: torch.device, *, scale: float,
            bound: float | None, atol: float, rtol: float, nan_policy: str,
            chunk_elems: int) -> tuple[float, float, int]:
    """The candidate's errors against ``judge_ref`` (same shape), chunk by chunk on ``device``.

    Args:
        scale: max |judge_ref| over its finite elements; the relative error's floor is
            ``max(1e-6 * scale, 1e-30)``.
        bound: the fp64-bound judge's bound (absolute, in the output's units); None: count the
            elements outside the allclose tolerance ``atol + rtol * |judge_ref|`` instead.

    Returns:
        ``(max abs err, max rel err, elements out of bound / tolerance)``. The abs error is taken over
        the elements finite in both; the rel error is NaN when ``judge_ref`` has a NaN (the caller's
        ``max`` over outputs then passes over it, as it always has).
    """
    floor = max(scale * 1e-6, 1e-30)
    max_abs, max_rel, bad = 0.0, 0.0, 0
    for oc, jc in _chunks((o, judge_ref), device, chunk_elems):
        if oc.numel():
            c_abs, c_rel, c_bad = _chunk_errors(oc, jc, floor=floor, bound=bound, atol=atol, rtol=rtol,
                                                nan_policy=nan_policy)
            max_abs, max_rel, bad = max(max_abs, c_abs), _max_nan(max_rel, c_rel), bad + c_bad
    return max_abs, max_rel, bad


def _exact_mismatch(o: torch.Tensor, r: torch.Tensor, device: torch.device,
                    chunk_elems: int) -> tuple[int, float]:
    """Elements of ``o`` (cast to the integer/bool dtype of ``r``) that differ from ``r``, and the max
    |o - r| in float64 over all elements, NaN if a floating ``o`` has a NaN (0.0 when no element
    differs: that second pass is skipped)."""
    n = 0
    for oc, rc in _chunks((o, r), device, chunk_elems):
        n += int((oc.to(r.dtype) != rc).sum())
    if not n:
        return 0, 0.0
    worst = 0.0
    for oc, rc in _chunks((o, r), device, chunk_elems):
        worst = _max_nan(worst, float((oc.double() - rc.double()).abs().max()))
    return n, worst


def compare_outputs(
    outs: Sequence[Any],
    refs: Sequence[Any],
    *,
    judge: str,
    atol: float,
    rtol: float,
    nan_policy: str = "match",
    check_dtype: bool = False,
    refs64: Sequence[Any] | None = None,
    fp64_multiple: float = 64.0,
    fp64_floor_rel: float = 4e-6,
    chunk_elems: int = 1 << 25,
) -> Comparison:
    """Compare flattened candidate outputs with the reference's.

    Args:
        outs: the candidate's outputs, flattened: tensors of the reference's shapes (any strides, on
            any device: moved to the reference's chunk by chunk), or numbers.
        refs: the reference outputs at the run's precision, flattened.
        judge: ``allclose`` or ``fp64-bound`` (see the module docstring).
        atol, rtol: allclose tolerances (also used for the KernelBench-style result recorded beside).
        nan_policy: ``fail`` (any NaN fails) or ``match`` (NaN/Inf only where the reference has them).
        check_dtype: require equal dtypes.
        refs64: float64 reference outputs, of the shapes of ``refs`` (required by ``fp64-bound``; when
            missing it falls back to allclose).
        fp64_multiple, fp64_floor_rel: the ``fp64-bound`` judge's ``k`` and ``floor_rel``.
        chunk_elems: the most elements of an output compared at once (>= 1). The temporaries come to
            at most 40 bytes per chunk element (five float64 chunks; 1.25 GiB at the default), plus a
            copy of the chunk of each tensor (output, reference, float64 reference) that is not
            contiguous or not on the reference's device. No result depends on it.
    """
    if chunk_elems < 1:
        raise ValueError(f"chunk_elems must be at least 1, not {chunk_elems}")
    if len(outs) != len(refs):
        return Comparison(False, "structure", detail=f"{len(outs)} outputs, reference has {len(refs)}")
    use64 = judge == "fp64-bound" and refs64 is not None and len(refs64) == len(refs)
    worst_abs, worst_rel, kb_all, mism = 0.0, 0.0, True, 0
    bound_used: float | None = None
    ref_err_max: float | None = None
    scale_max = 0.0
    per_output: list[list[float]] = []  # [max abs err, bound] of each floating output (fp64-bound)
    for i, (o, r) in enumerate(zip(outs, refs)):
        if not isinstance(r, torch.Tensor):
            if isinstance(o, torch.Tensor) or o != r:
                return Comparison(False, "structure", detail=f"output {i}: {o!r} != {r!r}")
            continue
        if not isinstance(o, torch.Tensor):
            return Comparison(False, "type", detail=f"output {i} is {type(o).__name__}, not a tensor")
        if tuple(o.shape) != tuple(r.shape):
            return Comparison(False, "shape", detail=f"output {i} shape {tuple(o.shape)} != {tuple(r.shape)}")
        if check_dtype and o.dtype != r.dtype:
            return Comparison(False, "dtype", detail=f"output {i} dtype {o.dtype} != {r.dtype}")
        if not (r.is_floating_point() or r.is_complex()):
            n, max_diff = _exact_mismatch(o, r, r.device, chunk_elems)
            if n:
                return Comparison(False, "tolerance", max_abs_err=max_diff, mismatches=n,
                                  detail=f"output {i}: {n} integer elements differ")
            continue
        judge_ref = refs64[i] if use64 else r  # type: ignore[index]
        fp = _fused_first_pass(o, r, judge_ref, atol=atol, rtol=rtol, nan_policy=nan_policy,
                               chunk_elems=chunk_elems) if use64 and _fused_usable(o, r, judge_ref) else None
        fused = fp is not None
        if fp is None:
            fp = _first_pass(o, r, judge_ref, r.device, atol=atol, rtol=rtol, nan_policy=nan_policy, use64=use64,
                             chunk_elems=chunk_elems)
        kb_all = kb_all and fp.allclose and not (nan_policy == "fail" and fp.nan_count > 0)
        if nan_policy == "fail" and fp.nan_count:
            return Comparison(False, "nan", detail=f"output {i} has {fp.nan_count} NaN values",
                              allclose_kernelbench=False)
        if nan_policy == "match" and (fp.nonfinite_moved or not fp.nonfinite_same):
            return Comparison(False, "nan", detail=f"output {i}: non-finite values differ from the "
                              f"reference at {fp.nonfinite_moved} positions", allclose_kernelbench=kb_all)
        bound = fp64_multiple * fp.ref_err + fp64_floor_rel * fp.bound_scale if use64 else None
        errs = None
        if fused and bound is not None:
            floor = max(fp.scale * 1e-6, 1e-30)
            errs = _run_fused(lambda: fusedjudge.errors(o, judge_ref, floor=floor, bound=bound))
        if errs is not None:
            max_abs, max_rel, bad = errs
        else:
            max_abs, max_rel, bad = _errors(o, judge_ref, r.device, scale=fp.scale, bound=bound, atol=atol,
                                            rtol=rtol, nan_policy=nan_policy, chunk_elems=chunk_elems)
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
        if judge_ref.numel():
            scale_max = max(scale_max, fp.scale)
        if bound is not None:
            bound_used = bound if bound_used is None else max(bound_used, bound)
            ref_err_max = fp.ref_err if ref_err_max is None else max(ref_err_max, fp.ref_err)
            per_output.append([max_abs, bound])
        mism += bad
    ok = mism == 0
    detail = "" if ok else (f"{mism} elements outside the bound {bound_used:.3g} (max abs err {worst_abs:.3g}, "
                            f"reference's own fp32 error {ref_err_max:.3g})" if use64 else
                            f"{mism} elements outside atol={atol:g} rtol={rtol:g} (max abs err {worst_abs:.3g})")
    return Comparison(ok, "" if ok else "tolerance", max_abs_err=worst_abs, max_rel_err=worst_rel,
                      allclose_kernelbench=kb_all, bound=bound_used, ref_err=ref_err_max, mismatches=mism,
                      detail=detail, extra={"scale": scale_max, "per_output": per_output})


def _fused_usable(o: Any, r: Any, judge_ref: Any) -> bool:
    return not _FUSED_OFF and fusedjudge.usable(o, r, judge_ref, interpret=_FUSED_ON_CPU)


#: set once the fused kernels failed to build or run in this process: the PyTorch passes from then on
_FUSED_OFF = False


def _run_fused(fn: Callable[[], _T]) -> _T | None:
    """``fn()`` (a :mod:`.fusedjudge` pass), or None where it failed and the PyTorch passes must judge.

    ``torch.OutOfMemoryError`` propagates (the callers' retry on out-of-memory handles it). Triton's own
    out-of-memory (a ``RuntimeError`` loading the kernel) falls back this once. Anything else (a kernel
    that does not build with this Triton, say) falls back and switches the fused passes off for the rest
    of the process, with one warning.
    """
    global _FUSED_OFF
    try:
        return fn()
    except torch.OutOfMemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - the PyTorch passes judge instead
        import logging

        if "out of memory" in str(e).lower():
            return None
        _FUSED_OFF = True
        logging.getLogger(__name__).warning("the fused fp64-bound passes failed (%s: %s); the PyTorch passes "
                                            "from now on", type(e).__name__, str(e)[:300])
        return None


def lower_precision_bound_ok(cmp: Comparison, scale_rel_err: float = 2e-2) -> bool:
    """Whether a failed fp32 comparison is still within what fp16/bf16/TF32 arithmetic gives: max
    abs error up to ``scale_rel_err`` times the output's scale (max |reference|). Used to tell
    ``policy(precision)`` from ``incorrect`` when the source shows lower-precision constructs."""
    if cmp.reason != "tolerance" or cmp.max_abs_err is None:
        return False
    scale = float(cmp.extra.get("scale") or 0.0)
    return scale > 0 and cmp.max_abs_err <= scale_rel_err * scale


def extra_check_verdict(fresh: Comparison, *, stale: Comparison | None = None, window: float = 2.0) -> str:
    """Read a failed integrity re-check (a call after timing, on inputs the candidate was not judged on
    for correctness) as a stale result or as rounding at the edge of the bound.

    The re-checks exist to catch results served from a cache (EXPLOITS K-16: "replay") or shaped by
    earlier calls ("history"). An honest kernel whose rounding varies from call to call (atomics over
    a long reduction, say) can cross the fp64 bound by a few percent on one extra call, as three honest
    Frobenius-norm kernels did on an H200 (6.1e-09 against a 5.6e-09 bound), and must not be called a
    cheat for it. Anything further out is not rounding: a cached output with an offset, lower
    precision switched on after the correctness trials, or a near-constant output replayed all miss
    the bound by far more (tests/exploits/test_margin_rule.py).

    Args:
        fresh: the output judged by the ``fp64-bound`` judge against the reference on the inputs of
            that call.
        stale: the same output judged against the reference on the inputs as they were before the
            trusted side refreshed them (the timed-output check only); an output clearly closer to
            that reference (half the error or less) is stale.
        window: a miss counts as rounding while every output's error stays within ``window`` times
            that output's own bound.

    Returns:
        ``"ok"`` (passed), ``"stale"`` (a cached, history-dependent or otherwise wrong result) or
        ``"margin"`` (over the bound by at most ``window`` times it; correctness rests on the judged
        trials). Without a float64 bound (the ``allclose`` judge) every miss is ``"stale"``.
    """
    if fresh.ok:
        return "ok"
    mine = fresh.extra.get("per_output") or []
    if fresh.reason != "tolerance" or fresh.bound is None or not mine:
        return "stale"  # wrong shape, dtype, NaN placement, structure, or no fp64 bound to measure by
    # each output against its own bound: a small output replayed whole must not hide under the
    # bound of a large one beside it
    if any(err > window * bound for err, bound in mine):
        return "stale"
    theirs = (stale.extra.get("per_output") or []) if stale is not None else []
    if len(theirs) == len(mine):
        for (err, bound), (err_stale, _) in zip(mine, theirs):
            if err > bound and err_stale <= 0.5 * err:
                return "stale"
    return "margin"
