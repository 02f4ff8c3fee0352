"""The refresh of input values between timed trials (timing.refresh_values) keeps a problem's
structure and changes the output of scale-invariant problems."""

from __future__ import annotations

import pytest
import torch

from kernelbench_harness.execution.timing import refresh_values


def test_refresh_keeps_order_and_finiteness_as_documented():
    # timing.refresh_values: "zeros stay zero, signs stay, ... and order is kept"
    x = torch.tensor([-float("inf"), -1.0, 0.0, 1.0, float("inf")])
    y = refresh_values(x, 3)
    assert torch.equal(torch.isinf(y), torch.isinf(x)), f"infinities became {y.tolist()}"


def test_refresh_keeps_order_for_large_float32_values():
    x = torch.linspace(2400.0, 2450.0, 5001)
    y = refresh_values(x, 0)
    assert bool((y[1:] >= y[:-1]).all()), "order of float32 inputs above ~2400 is not kept"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_refresh_is_increasing_keeps_zeros_signs_and_symmetry(dtype):
    x = torch.unique(torch.linspace(-3e4, 3e4, 100001).to(dtype))
    for r in (0, 1, 7, 1234):
        y = refresh_values(x, r)
        assert bool((y[1:] >= y[:-1]).all())
        assert torch.equal(torch.sign(y), torch.sign(x))
    a = torch.randn(64, 64).to(dtype)
    sym = a + a.T
    assert torch.equal(refresh_values(sym, 3), refresh_values(sym, 3).T)
    tri = torch.triu(a)
    assert torch.equal(torch.triu(refresh_values(tri, 5)), refresh_values(tri, 5))


def test_refresh_changes_a_normalised_output_beyond_fp32_rounding():
    x = torch.randn(8, 256, dtype=torch.float64)

    def n(t):
        return t / torch.linalg.vector_norm(t)

    moved = (n(refresh_values(x, 5)) - n(x)).abs().max() / n(x).abs().max()
    assert moved > 1e-5  # far above the fp64 bound of an fp32 kernel (a few 1e-6 relative)


def test_refresh_is_the_same_into_a_buffer_and_into_a_new_tensor():
    x = torch.randn(1000, 37)[:, 3:30]  # non-contiguous
    buf = torch.empty(1000, 27)
    assert torch.equal(refresh_values(x, 11, out=buf), refresh_values(x.contiguous(), 11))


def _refresh_by_the_docstring(src: torch.Tensor, r: int) -> torch.Tensor:
    """timing.refresh_values's formula written out, one new tensor per step (as it was written before it
    reused one buffer for every step)."""
    import math

    scale = 1.0 + (1 if r % 2 else -1) * ((r // 2) % 1000 + 1) * 2.0 ** -17
    work = src if src.dtype in (torch.float32, torch.float64) else src.float()
    wiggle = max(2.0 ** -12, 2.0 * torch.finfo(src.dtype).eps)
    arg = work / (work.abs() + 1.0)
    factor = torch.cos(arg * 1.7 + 0.37 * (r % 4096))
    factor = (factor * wiggle + scale).nan_to_num(nan=scale)
    assert not math.isnan(scale)
    return (work * factor).to(src.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_the_refresh_in_one_buffer_is_bit_for_bit_the_formula(dtype):
    """The trusted side and the candidate's process must compute the same bits; refresh_values computes
    each step in one buffer (the trusted side refreshes multi-GiB sets), with the formula's operations."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(20000, generator=gen, dtype=torch.float64) * torch.logspace(-30, 30, 20000,
                                                                                  dtype=torch.float64)).to(dtype)
    x[:5] = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0], dtype=torch.float64).to(dtype)
    bits = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16,
            torch.bfloat16: torch.int16}[dtype]
    for r in (0, 1, 7, 4099):
        want = _refresh_by_the_docstring(x, r)
        got = refresh_values(x, r)
        assert got.dtype == dtype and torch.equal(got.view(bits), want.view(bits)), r
        buf = torch.empty_like(x)
        assert refresh_values(x, r, out=buf) is buf and torch.equal(buf.view(bits), want.view(bits))
        assert not torch.equal(got.view(bits), x.view(bits))  # the values did change


def test_an_input_that_requires_grad_is_refreshed_to_the_same_values():
    """A reference may run with grad on (protocol reference_no_grad False) on inputs that require it: the
    refresh's buffer steps (out=) must not meet autograd, and the values must not change."""
    x = torch.randn(300, 7, requires_grad=True)
    got = refresh_values(x, 5)
    assert got.requires_grad and torch.equal(got.detach(), refresh_values(x.detach(), 5))
    with torch.no_grad():
        assert not refresh_values(x, 5).requires_grad
    half = torch.randn(64, dtype=torch.float16, requires_grad=True)
    assert torch.equal(refresh_values(half, 2).detach(), refresh_values(half.detach(), 2))
    assert not x.grad  # nothing flowed into the input


def test_keyed_rounds_are_the_public_ones_without_a_key_and_unpredictable_with_one():
    """timing.keyed_round: key 0 leaves the round as it is (the values as before keys); with the trusted side's key,
    a timed round's values are none of the public rounds' a candidate could compute ahead (helper-56's attack E)."""
    from kernelbench_harness.execution.timing import keyed_round

    x = torch.linspace(-3, 3, 64)
    assert keyed_round(7, 0) == 7 and torch.equal(refresh_values(x, 7, key=0), refresh_values(x, 7))
    assert keyed_round(7, 12345) == keyed_round(7, 12345) != keyed_round(7, 12346)
    public = [refresh_values(x, r) for r in range(2000)]
    for r in range(20):
        y = refresh_values(x, r, key=987654321)
        assert not any(torch.equal(y, p) for p in public)
        assert torch.equal(y, refresh_values(x, r, key=987654321))  # the trusted side computes the same values
        assert bool((torch.diff(y) > 0).all())  # still increasing: the problem's structure is kept
