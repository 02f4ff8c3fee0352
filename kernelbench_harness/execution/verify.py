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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

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


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, torch.Tensor]:
    o = out.to(torch.float64)
    r = ref.to(torch.float64)
    finite = torch.isfinite(r) & torch.isfinite(o)
    d = torch.where(finite, (o - r).abs(), torch.zeros_like(r))
    scale = float(torch.where(torch.isfinite(r), r.abs(), torch.zeros_like(r)).max()) if r.numel() else 0.0
    max_abs = float(d.max()) if d.numel() else 0.0
    floor = max(scale * 1e-6, 1e-30)
    rel = float((d / r.abs().clamp_min(floor)).max()) if d.numel() else 0.0
    return max_abs, rel, d


def _allclose(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> bool:
    if out.shape != ref.shape:
        return False
    try:
        return bool(torch.allclose(out, ref.to(out.dtype) if out.dtype != ref.dtype else ref, atol=atol, rtol=rtol))
    except RuntimeError:
        return bool(torch.allclose(out.double(), ref.double(), atol=atol, rtol=rtol))


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
) -> Comparison:
    """Compare flattened candidate outputs with the reference's.

    Args:
        outs: the candidate's outputs, flattened (tensors on the reference's device, or numbers).
        refs: the reference outputs at the run's precision, flattened.
        judge: ``allclose`` or ``fp64-bound`` (see the module docstring).
        atol, rtol: allclose tolerances (also used for the KernelBench-style result recorded beside).
        nan_policy: ``fail`` (any NaN fails) or ``match`` (NaN/Inf only where the reference has them).
        check_dtype: require equal dtypes.
        refs64: float64 reference outputs (required by ``fp64-bound``; when missing it falls back to allclose).
        fp64_multiple, fp64_floor_rel: the ``fp64-bound`` judge's ``k`` and ``floor_rel``.
    """
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
        if o.device != r.device:
            o = o.to(r.device)
        if not (r.is_floating_point() or r.is_complex()):
            if not torch.equal(o.to(r.dtype), r):
                n = int((o.to(r.dtype) != r).sum())
                return Comparison(False, "tolerance", max_abs_err=float((o.double() - r.double()).abs().max()),
                                  mismatches=n, detail=f"output {i}: {n} integer elements differ")
            continue
        kb_ok = _allclose(o, r, atol, rtol) and not (nan_policy == "fail" and bool(torch.isnan(o).any()))
        kb_all = kb_all and kb_ok
        judge_ref = refs64[i] if use64 else r  # type: ignore[index]
        if isinstance(judge_ref, torch.Tensor) and judge_ref.device != o.device:
            judge_ref = judge_ref.to(o.device)
        o_nan, r_nan = ~torch.isfinite(o), ~torch.isfinite(judge_ref)
        if nan_policy == "fail" and bool(torch.isnan(o).any()):
            return Comparison(False, "nan", detail=f"output {i} has {int(torch.isnan(o).sum())} NaN values",
                              allclose_kernelbench=False)
        if nan_policy == "match":
            if not torch.equal(o_nan, r_nan) or not torch.equal(o[o_nan].double().nan_to_num(),
                                                                 judge_ref[r_nan].double().nan_to_num()):
                n = int((o_nan != r_nan).sum())
                return Comparison(False, "nan", detail=f"output {i}: non-finite values differ from the "
                                  f"reference at {n} positions", allclose_kernelbench=kb_all)
        max_abs, max_rel, d = _errors(o, judge_ref)
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
        if judge_ref.numel():
            scale_max = max(scale_max, float(judge_ref.double().abs().nan_to_num(0, 0, 0).max()))
        if use64:
            ref_err, _, _ = _errors(r, judge_ref)
            scale = float(judge_ref.abs().nan_to_num(0, 0, 0).max()) if judge_ref.numel() else 0.0
            bound = fp64_multiple * ref_err + fp64_floor_rel * scale
            bound_used = bound if bound_used is None else max(bound_used, bound)
            ref_err_max = ref_err if ref_err_max is None else max(ref_err_max, ref_err)
            per_output.append([max_abs, bound])
            bad = int((d > bound).sum())
        else:
            # torch.allclose semantics (equal_nan=False): a non-finite reference element matches only the
            # same infinity; NaN never matches; a non-finite output never matches a finite reference
            jr = judge_ref.double()
            od = o.double()
            finite_r = torch.isfinite(jr)
            within = (d <= atol + rtol * jr.abs()) & torch.isfinite(od)
            same_inf = torch.isinf(jr) & (od == jr)
            if nan_policy == "match":  # NaN where the reference has NaN is a match under this policy
                same_inf = same_inf | (torch.isnan(jr) & torch.isnan(od))
            bad = int((~torch.where(finite_r, within, same_inf)).sum())
        mism += bad
    ok = mism == 0
    detail = "" if ok else (f"{mism} elements outside the bound {bound_used:.3g} (max abs err {worst_abs:.3g}, "
                            f"reference's own fp32 error {ref_err_max:.3g})" if use64 else
                            f"{mism} elements outside atol={atol:g} rtol={rtol:g} (max abs err {worst_abs:.3g})")
    return Comparison(ok, "" if ok else "tolerance", max_abs_err=worst_abs, max_rel_err=worst_rel,
                      allclose_kernelbench=kb_all, bound=bound_used, ref_err=ref_err_max, mismatches=mism,
                      detail=detail, extra={"scale": scale_max, "per_output": per_output})


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
