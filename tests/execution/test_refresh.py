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
