"""Chunked output comparison: equal, field by field, to the unchunked comparison it replaced, for
any chunk size; and its temporaries are bounded by the chunk, not the output.

``_reference_compare`` (with ``_ref_errors`` and ``_ref_allclose``) is ``compare_outputs`` as it was
before chunking (whole tensors in float64), kept verbatim as the oracle.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from kernelbench_harness.execution.verify import Comparison, compare_outputs

# --- the oracle: the unchunked implementation of commit 0d943da, verbatim (names aside) ------------------


def _ref_errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, torch.Tensor]:
    o = out.to(torch.float64)
    r = ref.to(torch.float64)
    finite = torch.isfinite(r) & torch.isfinite(o)
    d = torch.where(finite, (o - r).abs(), torch.zeros_like(r))
    scale = float(torch.where(torch.isfinite(r), r.abs(), torch.zeros_like(r)).max()) if r.numel() else 0.0
    max_abs = float(d.max()) if d.numel() else 0.0
    floor = max(scale * 1e-6, 1e-30)
    rel = float((d / r.abs().clamp_min(floor)).max()) if d.numel() else 0.0
    return max_abs, rel, d


def _ref_allclose(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> bool:
    if out.shape != ref.shape:
        return False
    try:
        return bool(torch.allclose(out, ref.to(out.dtype) if out.dtype != ref.dtype else ref, atol=atol, rtol=rtol))
    except RuntimeError:
        return bool(torch.allclose(out.double(), ref.double(), atol=atol, rtol=rtol))


def _reference_compare(
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
    """The unchunked implementation, verbatim (names aside)."""
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
        kb_ok = _ref_allclose(o, r, atol, rtol) and not (nan_policy == "fail" and bool(torch.isnan(o).any()))
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
        max_abs, max_rel, d = _ref_errors(o, judge_ref)
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
        if judge_ref.numel():
            scale_max = max(scale_max, float(judge_ref.double().abs().nan_to_num(0, 0, 0).max()))
        if use64:
            ref_err, _, _ = _ref_errors(r, judge_ref)
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


# --- cases -----------------------------------------------------------------------------------------------

ATOL = RTOL = 1e-4
CHUNKS = (1, 7, 64, 1 << 25)


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _close(base: torch.Tensor, dtype: torch.dtype, rel: float, seed: int) -> torch.Tensor:
    """``base`` (float64) with a relative perturbation of about ``rel``, cast to ``dtype``."""
    return (base * (1 + rel * torch.randn(base.shape, generator=_g(seed), dtype=torch.float64))).to(dtype)


def _with(t: torch.Tensor, at: Sequence[int], value: float) -> torch.Tensor:
    """A copy of ``t`` with the given flat positions set to ``value``."""
    t = t.clone()
    t.view(-1)[list(at)] = value
    return t


# non-finite values at chunk borders for chunk sizes 1, 7 and 64 (and the ends)
NAN_AT, POS_INF_AT, NEG_INF_AT = (6, 7, 63), (13, 14, 64), (0, 69)


def _nonfinite(t: torch.Tensor, nan_at: Sequence[int] = NAN_AT, pos_at: Sequence[int] = POS_INF_AT,
               neg_at: Sequence[int] = NEG_INF_AT) -> torch.Tensor:
    return _with(_with(_with(t, nan_at, math.nan), pos_at, math.inf), neg_at, -math.inf)


def _cases() -> dict[str, tuple[list[Any], list[Any], list[Any] | None, dict[str, Any]]]:
    """name -> (outs, refs, refs64, extra keyword arguments)."""
    b = torch.randn(6, 10, generator=_g(1), dtype=torch.float64)
    v = torch.randn(70, generator=_g(2), dtype=torch.float64)
    cube = torch.randn(3, 5, 11, generator=_g(3), dtype=torch.float64)  # rows of 55 and 11
    ints = torch.randint(-50, 50, (9, 11), generator=_g(4))
    c: dict[str, tuple[list[Any], list[Any], list[Any] | None, dict[str, Any]]] = {}

    for dt, rel in ((torch.float32, 1e-7), (torch.float16, 1e-3), (torch.bfloat16, 1e-2), (torch.float64, 1e-13)):
        name = str(dt).removeprefix("torch.")
        ref = _close(b, dt, rel / 2, 10)
        c[f"{name}-close"] = ([_close(b, dt, rel, 11)], [ref], [b], {})
        c[f"{name}-off-at-borders"] = ([_with(_close(b, dt, rel, 11), (6, 7, 13, 14, 59), 3.0)], [ref], [b], {})
        c[f"{name}-far"] = ([_close(b, dt, 0.3, 12)], [ref], [b], {})
    c["fp16-out-fp32-ref"] = ([_close(b, torch.float16, 1e-4, 11)], [b.float()], [b], {})
    c["fp32-out-fp64-ref"] = ([_close(b, torch.float32, 1e-7, 11)], [b], [b], {})
    c["fp32-out-fp32-ref64"] = ([_close(b, torch.float32, 1e-7, 11)], [b.float()], [_close(b, torch.float32, 1e-8, 9)],
                                {})
    c["check-dtype"] = ([b.half()], [b.float()], [b], {"check_dtype": True})
    c["check-dtype-equal"] = ([_close(b, torch.float32, 1e-7, 11)], [b.float()], [b], {"check_dtype": True})

    # NaN/Inf at chunk borders
    ref = _nonfinite(v.float())
    c["nonfinite-same"] = ([_nonfinite(_close(v, torch.float32, 1e-7, 13))], [ref], [_nonfinite(v)], {})
    c["nonfinite-off-too"] = ([_with(_nonfinite(_close(v, torch.float32, 1e-7, 13)), (8, 65), 9.0)], [ref],
                              [_nonfinite(v)], {})
    c["nan-moved"] = ([_nonfinite(v.float(), nan_at=(6, 8, 63))], [ref], [_nonfinite(v)], {})
    c["nan-for-inf"] = ([_nonfinite(v.float(), nan_at=NAN_AT + (64,), pos_at=(13, 14))], [ref],
                        [_nonfinite(v)], {})
    c["inf-sign"] = ([_nonfinite(v.float(), pos_at=(13, 14), neg_at=NEG_INF_AT + (64,))], [ref],
                     [_nonfinite(v)], {})
    c["nan-only-in-out"] = ([_with(v.float(), (7, 64), math.nan)], [v.float()], [v], {})
    c["inf-only-in-out"] = ([_with(v.float(), (63,), math.inf)], [v.float()], [v], {})
    c["nan-only-in-ref64"] = ([v.float()], [v.float()], [_with(v, (64,), math.nan)], {})
    c["nan-only-in-ref"] = ([v.float()], [_with(v.float(), (7,), math.nan)], [v], {})
    c["nan-in-ref-and-out"] = ([_with(_close(v, torch.float32, 1e-3, 14), (7,), math.nan)],
                               [_with(v.float(), (7,), math.nan)], [_with(v, (7,), math.nan)], {})

    # all-zero references: the relative error's floor is 1e-30
    z = torch.zeros(70, dtype=torch.float64)
    c["zeros-equal"] = ([z.float()], [z.float()], [z], {})
    c["zeros-off"] = ([_with(z.float(), (7, 64), 1e-20)], [z.float()], [z], {})
    c["zeros-with-nan"] = ([_with(z.float(), (7,), math.nan)], [_with(z.float(), (7,), math.nan)],
                           [_with(z, (7,), math.nan)], {})
    # runs of tiny and zero reference elements beside large ones: the relative error's floor
    # (1e-6 of the largest |reference| of the whole output) decides their relative error
    tiny = _with(_with(v, range(20, 42), 1e-12), range(42, 56), 0.0)
    c["tiny-reference-elements"] = ([_with(_close(tiny, torch.float32, 1e-7, 23), range(21, 50, 4), 1e-9)],
                                    [tiny.float()], [tiny], {})
    big = torch.tensor([1e308, -1e308, 1.0], dtype=torch.float64)
    c["overflowing-difference"] = ([-big], [big], [big], {})

    # integer and boolean outputs: exact
    c["int-equal"] = ([ints.clone()], [ints], None, {})
    c["int-differ-at-borders"] = ([_with(ints, (6, 7, 63, 64, 98), 1000)], [ints], None, {})
    c["int32-out-int64-ref"] = ([ints.int()], [ints], None, {})
    c["float-out-int-ref"] = ([ints.double() + 0.25], [ints], None, {})
    c["float-out-int-ref-differ"] = ([_with(ints.double(), (7, 64), 0.5)], [ints], None, {})
    c["bool-equal"] = ([ints > 0], [ints > 0], None, {})
    c["bool-differ"] = ([ints >= 0], [ints > 0], None, {})
    flags = ints > 0  # a float output with NaN (cast to True) and a miss before it: max_abs_err is NaN
    c["nan-out-bool-ref"] = ([_with(_with(flags.double(), (64,), math.nan), (3,), 1.0 - float(flags.view(-1)[3]))],
                             [flags], None, {})
    c["int-transposed"] = ([_with(ints, (7,), 77).t().contiguous().t()], [ints], None, {})

    # structure
    c["shape"] = ([b.float().reshape(10, 6)], [b.float()], [b], {})
    c["type"] = ([1.0], [b.float()], [b], {})
    c["structure-length"] = ([b.float()], [b.float(), b.float()], [b, b], {})
    c["numbers-equal"] = ([3, b.float()], [3, b.float()], [3, b], {})
    c["numbers-differ"] = ([3, b.float()], [4, b.float()], [4, b], {})
    c["tensor-for-number"] = ([torch.tensor(3.0), b.float()], [3, b.float()], [3, b], {})

    # strides
    out = _close(b, torch.float32, 1e-6, 15)
    c["transposed-out"] = ([out.t().contiguous().t()], [b.float()], [b], {})
    c["transposed-all"] = ([out.t()], [b.float().t()], [b.t()], {})
    c["transposed-ref64"] = ([out], [b.float()], [b.t().contiguous().t()], {})
    c["strided-slice"] = ([torch.cat([out, out], 1)[:, ::2]], [b.float()], [b], {})
    c["expanded"] = ([out[2].expand(6, 10)], [b[2].float().expand(6, 10).contiguous()], [b[2].expand(6, 10)], {})
    cube_out = _with(_close(cube, torch.float32, 1e-6, 16), (6, 7, 54, 55), math.nan)
    cube_ref = _with(cube.float(), (6, 7, 54, 55), math.nan)
    c["permuted-3d"] = ([cube_out.permute(2, 0, 1).contiguous().permute(1, 2, 0)], [cube_ref],
                        [_with(cube, (6, 7, 54, 55), math.nan)], {})
    c["permuted-3d-off"] = ([_with(cube_out, (100, 160), 5.0).permute(1, 0, 2).contiguous().permute(1, 0, 2)],
                            [cube_ref], [_with(cube, (6, 7, 54, 55), math.nan)], {})

    # sizes
    e = torch.zeros(3, 0, 4)
    c["zero-elements"] = ([e.clone()], [e], [e.double()], {})
    c["zero-elements-1d"] = ([torch.zeros(0, dtype=torch.float16)], [torch.zeros(0)], [torch.zeros(0).double()], {})
    c["zero-elements-int"] = ([torch.zeros(0, 5, dtype=torch.int64)], [torch.zeros(0, 5, dtype=torch.int64)], None, {})
    c["zero-dim"] = ([torch.tensor(1.00001)], [torch.tensor(1.0)], [torch.tensor(1.0, dtype=torch.float64)], {})
    c["zero-dim-nan"] = ([torch.tensor(math.nan)], [torch.tensor(math.nan)], [torch.tensor(math.nan).double()], {})

    # several outputs
    ok32, ok16 = _close(b, torch.float32, 1e-7, 17), _close(v, torch.float16, 1e-4, 18)
    c["multi-ok"] = ([ok32, ints.clone(), 3, ok16], [b.float(), ints, 3, v.half()], [b, ints, 3, v], {})
    c["multi-second-off"] = ([ok32, _close(v, torch.float16, 0.1, 19)], [b.float(), v.half()], [b, v], {})
    c["multi-first-off-second-nan"] = ([_close(b, torch.float32, 0.1, 20), _with(ok16, (7,), math.nan)],
                                       [b.float(), v.half()], [b, v], {})
    c["multi-both-off"] = ([_close(b, torch.float32, 1e-2, 21), _close(v, torch.float32, 1e-5, 22)],
                           [b.float(), v.float()], [b, v], {})
    c["multi-int-fails-last"] = ([ok32, _with(ints, (64,), 0)], [b.float(), ints], [b, ints], {})
    c["multi-refs64-short"] = ([ok32, ok16], [b.float(), v.half()], [b], {})
    return c


CASES = _cases()


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types, NaN equal to NaN, through lists and dicts."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _assert_same(got: Comparison, want: Comparison, where: str) -> None:
    for f in fields(Comparison):
        x, y = getattr(got, f.name), getattr(want, f.name)
        assert _same(x, y), f"{where}: {f.name} = {x!r}, the unchunked comparison gives {y!r}"


@pytest.mark.parametrize("name", list(CASES))
def test_chunked_comparison_equals_the_unchunked_one(name: str) -> None:
    outs, refs, refs64, kw = CASES[name]
    for judge in ("allclose", "fp64-bound"):
        for nan_policy in ("match", "fail"):
            for r64 in (refs64, None) if judge == "fp64-bound" else (refs64,):  # allclose ignores refs64
                args = dict(judge=judge, atol=ATOL, rtol=RTOL, nan_policy=nan_policy, refs64=r64, **kw)
                want = _reference_compare(outs, refs, **args)
                # fp64-bound without refs64 falls back to the allclose judge's path: spare it the slowest size
                for chunk in CHUNKS if judge == "allclose" or r64 is not None else CHUNKS[1:]:
                    got = compare_outputs(outs, refs, chunk_elems=chunk, **args)
                    _assert_same(got, want, f"{judge}/{nan_policy}/refs64={r64 is not None}/chunk={chunk}")


def test_the_cases_reach_every_verdict() -> None:
    """The cases above are worth comparing: they pass and fail in each of the ways there are."""
    seen: set[tuple[str, str]] = set()
    for outs, refs, refs64, kw in CASES.values():
        for judge in ("allclose", "fp64-bound"):
            for nan_policy in ("match", "fail"):
                got = compare_outputs(outs, refs, judge=judge, atol=ATOL, rtol=RTOL, nan_policy=nan_policy,
                                      refs64=refs64, chunk_elems=7, **kw)
                seen.add((judge, got.reason))
                if got.max_rel_err is not None and math.isnan(got.max_rel_err):
                    seen.add((judge, "nan-rel"))
    for judge in ("allclose", "fp64-bound"):
        for reason in ("", "tolerance", "nan", "shape", "dtype", "type", "structure"):
            assert (judge, reason) in seen, (judge, reason)


def test_comparing_a_complex_output_is_unchanged() -> None:
    z = torch.randn(40, generator=_g(5), dtype=torch.complex128)
    out = (z * (1 + 1e-7j)).to(torch.complex64)
    for judge in ("allclose", "fp64-bound"):
        args = {"judge": judge, "atol": ATOL, "rtol": RTOL, "refs64": [z]}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # casting complex to real drops the imaginary part
            want = _reference_compare([out], [z.to(torch.complex64)], **args)
            for chunk in (1, 7, 64):
                _assert_same(compare_outputs([out], [z.to(torch.complex64)], chunk_elems=chunk, **args), want,
                             f"{judge}/chunk={chunk}")


def test_chunk_elems_must_be_positive() -> None:
    with pytest.raises(ValueError, match="chunk_elems"):
        compare_outputs([torch.ones(3)], [torch.ones(3)], judge="allclose", atol=ATOL, rtol=RTOL, chunk_elems=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="an output on another device needs a CUDA device")
def test_an_output_on_another_device_is_moved_chunk_by_chunk() -> None:
    b = torch.randn(6, 10, generator=_g(6), dtype=torch.float64)
    out = _with(_close(b, torch.float32, 1e-6, 7), (7, 30), 2.0)
    for judge in ("allclose", "fp64-bound"):
        args = {"judge": judge, "atol": ATOL, "rtol": RTOL, "refs64": [b.cuda()]}
        want = _reference_compare([out], [b.float().cuda()], **args)
        _assert_same(compare_outputs([out.t().contiguous().t()], [b.float().cuda()], chunk_elems=7, **args), want,
                     judge)


# --- memory ----------------------------------------------------------------------------------------------

N, CHUNK = 1 << 20, 1 << 16  # 16 chunks
CHUNK64 = 8 * CHUNK  # bytes of a float64 chunk


def _peak_bytes(fn: Callable[[], Any]) -> int:
    """The most bytes that ``fn`` held allocated at once on the CPU beyond what it started with, from
    the profiler's allocations and frees (each operator's own, children apart) in time order."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    for ev in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += ev.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


@pytest.fixture(scope="module")
def large() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ref64 = torch.randn(N, generator=_g(8), dtype=torch.float64)
    out = _with(_close(ref64, torch.float32, 1e-6, 9), (5, N // 2), 7.0)  # two elements out of bound
    return out, ref64.float(), ref64


@pytest.mark.parametrize(("layout", "judge"), [("contiguous", "fp64-bound"), ("transposed", "allclose")])
def test_temporaries_are_bounded_by_the_chunk(large: tuple[torch.Tensor, ...], layout: str, judge: str) -> None:
    out, ref, ref64 = large
    if layout == "transposed":  # every chunk of the output is copied before it is compared
        out, ref, ref64 = (t.reshape(1 << 10, -1).t().contiguous().t() for t in (out, ref, ref64))
    args = {"judge": judge, "atol": ATOL, "rtol": RTOL, "refs64": [ref64]}
    chunked = _peak_bytes(lambda: compare_outputs([out], [ref], chunk_elems=CHUNK, **args))
    # a handful of float64 chunks (5 measured), whatever the size of the output
    assert chunked <= 8 * CHUNK64, chunked / CHUNK64
    # the measure sees an unchunked comparison: whole float64 copies of the output (6.5 of them)
    whole = _peak_bytes(lambda: _reference_compare([out], [ref], **args))
    assert whole >= 4 * 8 * N, whole / (8 * N)
    cmp = compare_outputs([out], [ref], chunk_elems=CHUNK, **args)
    assert not cmp.ok and cmp.mismatches == 2
