"""Re-checks after timing: a stale result is a replay, rounding at the bound's edge is not."""

from __future__ import annotations

import torch

from kernelbench_harness.execution.verify import Comparison, compare_outputs, extra_check_verdict

K, FLOOR = 64.0, 4e-6


def judge(out: torch.Tensor, ref64: torch.Tensor) -> Comparison:
    ref32 = ref64.float()
    return compare_outputs([out], [ref32], judge="fp64-bound", atol=1e-4, rtol=1e-4, nan_policy="match",
                           check_dtype=True, refs64=[ref64], fp64_multiple=K, fp64_floor_rel=FLOOR)


def frob(x: torch.Tensor) -> torch.Tensor:
    return x / torch.linalg.vector_norm(x)


def test_rounding_just_over_the_bound_is_a_margin_not_a_replay():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1 << 16, generator=g, dtype=torch.float64)
    ref64 = frob(x)
    bound = FLOOR * float(ref64.abs().max()) + K * float((ref64.float().double() - ref64).abs().max())
    noisy = (ref64 + 1.08 * bound * torch.sign(ref64)).float()  # 8% over the bound everywhere
    cmp = judge(noisy, ref64)
    assert not cmp.ok and cmp.reason == "tolerance"
    assert cmp.bound is not None and abs(cmp.bound - bound) <= 1e-6 * bound
    assert extra_check_verdict(cmp) == "margin"
    # three times the bound is not rounding any more
    assert extra_check_verdict(judge((ref64 + 3 * bound * torch.sign(ref64)).float(), ref64)) == "stale"
    # the scale-invariant timed check: the unscaled reference is the same function value, so the
    # output is no closer to it than to the fresh one
    same = judge(noisy, frob(x * (1 + 2 ** -17)))
    assert extra_check_verdict(cmp, stale=same) == "margin"


def test_a_stale_result_on_fresh_values_is_a_replay():
    g = torch.Generator().manual_seed(1)
    old, new = (torch.randn(4096, generator=g, dtype=torch.float64) for _ in range(2))
    cmp = judge(torch.tanh(old).float(), torch.tanh(new))
    assert extra_check_verdict(cmp) == "stale"


def test_a_result_cached_before_rescaling_is_a_replay_even_within_the_margin_window():
    # a stale output off by less than twice the bound, but matching the unscaled reference
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4096, generator=g, dtype=torch.float64)
    cached = (2 * x).float()
    stale = judge(cached, 2 * x)
    bound = stale.bound
    scaled = x * (1 + 1.5 * bound / float((2 * x).abs().max()))
    fresh = judge(cached, 2 * scaled)
    assert not fresh.ok and stale.ok and fresh.max_abs_err <= 2 * fresh.bound
    assert extra_check_verdict(fresh, stale=stale) == "stale"
    assert extra_check_verdict(fresh) == "margin"


def test_non_tolerance_failures_are_never_margins():
    for reason in ("shape", "nan", "dtype", "structure", "type"):
        assert extra_check_verdict(Comparison(False, reason)) == "stale"
    assert extra_check_verdict(Comparison(True)) == "ok"
    # the allclose judge has no float64 bound to measure a margin by
    assert extra_check_verdict(Comparison(False, "tolerance", max_abs_err=1e-9)) == "stale"


def test_margin_is_judged_per_output_not_against_another_outputs_bound():
    # a model with two outputs of different scales (mean and a large sum, say); the small one is a
    # stale replay (all zeros: 100% wrong), the large one is right
    g = torch.Generator().manual_seed(0)
    small = torch.rand(256, generator=g, dtype=torch.float64) * 1e-3
    big = torch.randn(256, generator=g, dtype=torch.float64) * 300
    cmp = judge64([torch.zeros(256), big.float()], [small, big])
    assert not cmp.ok
    # the small output misses its own bound (about 4e-9) by a factor of ~2e5 ...
    own = judge64([torch.zeros(256)], [small])
    assert own.max_abs_err > 1e4 * own.bound
    # ... yet the re-check reads it as rounding at the edge of the bound
    assert extra_check_verdict(cmp) == "stale", "a stale output was excused by another output's bound"


def judge64(outs, refs64):
    return compare_outputs(outs, [r.float() for r in refs64], judge="fp64-bound", atol=1e-4, rtol=1e-4,
                           nan_policy="match", check_dtype=True, refs64=refs64, fp64_multiple=K,
                           fp64_floor_rel=FLOOR)
