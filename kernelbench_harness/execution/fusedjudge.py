"""The ``fp64-bound`` judge's two passes over a large output, each as one fused Triton kernel.

:func:`.verify.compare_outputs` measures a floating output in two passes (see its module docstring):
the first gathers the float64 reference's scale, the PyTorch reference's own error against it and the
NaN/Inf checks; the second, the candidate's errors against the bound the first gives. Written as
PyTorch operations over chunks, each pass is a dozen float64 elementwise kernels and reductions per
chunk. On an H200 one comparison of a 6 GiB float32 output took 0.33 s that way
(``scripts/gpu/judge_cost.py``), about fifteen times what reading the three tensors once costs, and a
large level-1 job makes eight of them on the sweep's critical path (issue 7).

Here each pass reads every element once and writes one partial result per block of ``BLOCK``
elements; the partials are reduced with PyTorch (the KernelBench ``allclose`` beside reads the output
and the reference once more). Every quantity is the one the PyTorch passes compute, element for
element: the same float64 conversions (exact), subtraction and absolute value, float64 division
(``div.rn.f64``, correctly rounded: ``tl.fdiv(..., ieee_rounding=True)`` does not build for float64 on
Triton 3.9), and maxima and counts, which do not depend on the order they are taken in. Neither kernel
multiplies, so no fused multiply-add can round differently. So the verdict
and every recorded number are the same. ``tests/execution/test_fused_judge.py`` checks the two against
each other under Triton's interpreter (NaN, infinities, signed zeros, float32 subnormals, every floating
dtype; the interpreter flushes bfloat16 subnormals, the GPU does not) and builds both kernels for sm_90
with the installed Triton. On an H200 the two gave equal results on a correct and a wrong 6 GiB output.

The kernels are built into a Triton cache folder of this process's own (a fresh ``mkdtemp`` folder,
removed at exit), never the user's shared one: a cubin or launcher planted there by a candidate would run
inside the trusted judge.

Used for contiguous real floating outputs of at least :data:`MIN_ELEMS` elements whose output,
reference and float64 reference are on one CUDA device (:func:`usable`); everything else takes the
PyTorch passes. The KernelBench-style ``allclose`` recorded beside stays PyTorch's own
``torch.allclose``.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["MIN_ELEMS", "usable", "first_pass", "errors"]

#: outputs smaller than this take the PyTorch passes (their cost is the launches, not the bytes)
MIN_ELEMS = 1 << 22
BLOCK = 4096
_REAL = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def usable(o: Any, r: Any, judge_ref: Any, *, interpret: bool = False) -> bool:
    """Whether :func:`first_pass` and :func:`errors` apply: three contiguous tensors of one shape, ``o`` and
    ``r`` real floating, ``judge_ref`` float64, at least :data:`MIN_ELEMS` elements, all on one CUDA
    device (or, with ``interpret``, on the CPU for Triton's interpreter), and Triton importable."""
    if not all(isinstance(t, torch.Tensor) for t in (o, r, judge_ref)):
        return False
    if o.dtype not in _REAL or r.dtype not in _REAL or judge_ref.dtype != torch.float64:
        return False
    if not (o.shape == r.shape == judge_ref.shape) or o.numel() < (1 if interpret else MIN_ELEMS):
        return False
    if not (o.is_contiguous() and r.is_contiguous() and judge_ref.is_contiguous()):
        return False
    dev = judge_ref.device
    if o.device != dev or r.device != dev or dev.type != ("cpu" if interpret else "cuda"):
        return False
    return _kernels() is not None


@functools.lru_cache(maxsize=1)
def _kernels() -> tuple[Any, Any] | None:
    """The two Triton kernels, defined on first use (None where Triton cannot be imported)."""
    try:
        import triton
        import triton.language as tl
    except Exception:  # noqa: BLE001 - no Triton: the PyTorch passes
        return None

    @triton.jit
    def _pass1(o_ptr, r_ptr, j_ptr, n, scale_out, referr_out, counts_out, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        o = tl.load(o_ptr + offs, mask=m, other=0.0).to(tl.float64)
        r = tl.load(r_ptr + offs, mask=m, other=0.0).to(tl.float64)
        j = tl.load(j_ptr + offs, mask=m, other=0.0).to(tl.float64)
        inf = float("inf")
        nan_o, nan_j = o != o, j != j
        fin_o = (o == o) & (tl.abs(o) != inf)
        fin_j = (j == j) & (tl.abs(j) != inf)
        fin_r = (r == r) & (tl.abs(r) != inf)
        zero = tl.zeros([BLOCK], dtype=tl.float64)
        # max |j| over finite j; max |r - j| where both are finite
        tl.store(scale_out + pid, tl.max(tl.where(fin_j & m, tl.abs(j), zero), axis=0))
        tl.store(referr_out + pid, tl.max(tl.where(fin_r & fin_j & m, tl.abs(r - j), zero), axis=0))
        # non-finite in exactly one of output and judge_ref; non-finite in both but of another kind
        # (NaN, +Inf, -Inf); NaN in the output
        moved = tl.sum((fin_o != fin_j).to(tl.int64) * m.to(tl.int64), axis=0)
        other_kind = (~fin_o) & (~fin_j) & ((nan_o != nan_j) | ((~nan_o) & (~nan_j) & (o != j)))
        kind = tl.sum((other_kind & m).to(tl.int64), axis=0)
        nans = tl.sum((nan_o & m).to(tl.int64), axis=0)
        tl.store(counts_out + pid * 3, moved)
        tl.store(counts_out + pid * 3 + 1, kind)
        tl.store(counts_out + pid * 3 + 2, nans)

    @triton.jit
    def _pass2(o_ptr, j_ptr, n, scalars, abs_out, rel_out, counts_out, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        # float64 (a Python float argument would be passed as float32; an argument named "params" clashes
        # with a name in the launch binder Triton 3.6 generates)
        floor = tl.load(scalars)
        bound = tl.load(scalars + 1)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        o = tl.load(o_ptr + offs, mask=m, other=0.0).to(tl.float64)
        j = tl.load(j_ptr + offs, mask=m, other=0.0).to(tl.float64)
        inf = float("inf")
        nan_j = j != j
        fin_o = (o == o) & (tl.abs(o) != inf)
        fin_j = (j == j) & (tl.abs(j) != inf)
        zero = tl.zeros([BLOCK], dtype=tl.float64)
        d = tl.where(fin_o & fin_j & m, tl.abs(o - j), zero)
        tl.store(abs_out + pid, tl.max(d, axis=0))
        # d / max(|j|, floor): NaN where j is NaN (counted apart; d is 0 there), 0 where j is infinite
        aj = tl.abs(j)
        den = tl.where(aj < floor, floor, aj)
        rel = tl.where(nan_j | (~m), zero, d / tl.where(nan_j | (~m), 1.0, den))
        tl.store(rel_out + pid, tl.max(rel, axis=0))
        tl.store(counts_out + pid * 2, tl.sum((nan_j & m).to(tl.int64), axis=0))
        tl.store(counts_out + pid * 2 + 1, tl.sum(((d > bound) & m).to(tl.int64), axis=0))

    return _pass1, _pass2


def _grid(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


@functools.lru_cache(maxsize=1)
def _private_cache() -> str:
    """This process's own Triton cache folder for the judge's kernels (removed at exit)."""
    import atexit
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="kb-judge-triton-")
    atexit.register(shutil.rmtree, path, True)
    return path


@contextlib.contextmanager
def _own_cache() -> Iterator[None]:
    """``TRITON_CACHE_DIR`` pointed at :func:`_private_cache` while a kernel is compiled and launched."""
    before = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = _private_cache()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = before


def _launch(kernel: Any, args: tuple[Any, ...], n_counts: int, device: torch.device,
            n: int) -> tuple[list[float], list[int]]:
    """Run one pass over ``n`` elements: ``kernel(*args, max0, max1, counts)`` with one float64 maximum of
    each kind and ``n_counts`` int64 counts written per block; returns the two maxima and the counts over
    all blocks."""
    g = _grid(n)
    maxima = torch.empty((2, g), dtype=torch.float64, device=device)
    counts = torch.empty(g * n_counts, dtype=torch.int64, device=device)
    with _own_cache():
        kernel[(g,)](*args, maxima[0], maxima[1], counts, BLOCK=BLOCK)
    return maxima.amax(dim=1).tolist(), counts.view(g, n_counts).sum(0).tolist()


def first_pass(o: torch.Tensor, r: torch.Tensor, judge_ref: torch.Tensor) -> dict[str, Any]:
    """One read of ``o``, ``r`` and ``judge_ref`` (see :func:`usable`).

    Raises:
        Exception: whatever Triton raises building or launching the kernel (the caller falls back).

    Returns:
        ``scale`` (max |judge_ref| over its finite elements, float64), ``ref_err`` (max |r - judge_ref|
        over the elements finite in both), ``nonfinite_moved`` (elements non-finite in exactly one of
        ``o`` and ``judge_ref``), ``nonfinite_other_kind`` (non-finite in both, but NaN against an
        infinity or infinities of opposite sign) and ``nan_count`` (NaN elements of ``o``).
    """
    (s, e), (moved, kind, nans) = _launch(_kernels()[0], (o, r, judge_ref, o.numel()), 3,  # type: ignore[index]
                                          judge_ref.device, o.numel())
    return {"scale": float(s), "ref_err": float(e), "nonfinite_moved": int(moved),
            "nonfinite_other_kind": int(kind), "nan_count": int(nans)}


def errors(o: torch.Tensor, judge_ref: torch.Tensor, *, floor: float, bound: float) -> tuple[float, float, int]:
    """One read of ``o`` and ``judge_ref``: ``(max abs err, max rel err, elements with abs err > bound)``,
    as :func:`.verify._errors` computes them with a bound (the rel error is NaN when ``judge_ref`` has
    a NaN)."""
    scalars = torch.tensor([float(floor), float(bound)], dtype=torch.float64, device=judge_ref.device)
    (a, rel), (nan_j, bad) = _launch(_kernels()[1], (o, judge_ref, o.numel(), scalars), 2,  # type: ignore[index]
                                     judge_ref.device, o.numel())
    return float(a), (float("nan") if nan_j else float(rel)), int(bad)
