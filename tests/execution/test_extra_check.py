"""Re-checks after timing: a stale result is a replay, rounding at the bound's edge is not."""

from __future__ import annotations

import torch

from kernelbench_harness.execution.verify import Comparison, compare_outputs, extra_check_verdict

K, FLOOR = 64.0, 4e-6


def judge(out: torch.Tensor, ref64: torch.Tensor) -> Comparison:
    ref32 = ref64.float()
    cmp = compare_outputs([out], [ref32], judge="fp64-bound", atol=1e-4, rtol=1e-4, nan_policy="match",
                          check_dtype=True, refs64=[ref64], fp64_multiple=K, fp64_floor_rel=FLOOR)
    cmp.extra["ref_max"] = float(ref64.abs().max())
    return cmp


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
    assert extra_check_verdict(cmp, ref_max=cmp.extra["ref_max"], rtol=1e-4) == "margin"
    # the scale-invariant timed check: the unscaled reference is the same function value, so the
    # output is no closer to it than to the fresh one
    same = judge(noisy, frob(x * (1 + 2 ** -17)))
    assert extra_check_verdict(cmp, ref_max=cmp.extra["ref_max"], rtol=1e-4, stale=same) == "margin"


def test_a_stale_result_on_fresh_values_is_a_replay():
    g = torch.Generator().manual_seed(1)
    old, new = (torch.randn(4096, generator=g, dtype=torch.float64) for _ in range(2))
    cmp = judge(torch.tanh(old).float(), torch.tanh(new))
    assert extra_check_verdict(cmp, ref_max=cmp.extra["ref_max"], rtol=1e-4) == "stale"


def test_a_result_cached_before_rescaling_is_a_replay_even_when_small():
    # the timed inputs are the stored set times 1 + 2^-10: a cached output is off by ~1e-3 relative,
    # under the 10 * rtol gross threshold, but it matches the unscaled reference
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4096, generator=g, dtype=torch.float64)
    scaled = x * (1 + 2 ** -10)
    cached = (2 * x).float()
    fresh = judge(cached, 2 * scaled)
    stale = judge(cached, 2 * x)
    assert not fresh.ok and stale.ok
    assert fresh.max_abs_err < 10 * 1e-4 * fresh.extra["ref_max"]  # not gross on its own
    assert extra_check_verdict(fresh, ref_max=fresh.extra["ref_max"], rtol=1e-4, stale=stale) == "stale"
    assert extra_check_verdict(fresh, ref_max=fresh.extra["ref_max"], rtol=1e-4) == "margin"


def test_non_tolerance_failures_are_never_margins():
    for reason in ("shape", "nan", "dtype", "structure", "type"):
        assert extra_check_verdict(Comparison(False, reason), ref_max=1.0, rtol=1e-4) == "stale"
    assert extra_check_verdict(Comparison(True), ref_max=1.0, rtol=1e-4) == "ok"
