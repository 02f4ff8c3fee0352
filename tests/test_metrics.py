"""Metrics against hand-computed values (kernelbench_harness.metrics)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from kernelbench_harness.core import Problem
from kernelbench_harness.metrics import (
    Estimate,
    bootstrap_ci,
    fast_p,
    fast_p_curve,
    geometric_mean,
    level_weighted,
    pass_at_k,
    sample_scores,
    speedup,
    speedups_by_mode,
    summarize_run,
)
from kernelbench_harness.store import RESULT_COLUMNS

_PASSED = {"correct", "policy", "timing_invalid"}
_RID = [0]


def _problems(level: int, n: int) -> list[Problem]:
    return [Problem(level, i, f"P{i}", f"# L{level} problem {i}\n") for i in range(1, n + 1)]


def _row(
    level: int,
    pid: int,
    outcome: str,
    *,
    eager: float | None = None,
    compile_: float | None = None,
    cand: float | None = None,
    model: str = "m",
    sample: int = 0,
    turn: int = 0,
    has_speedup: bool | None = None,
    baselines_ms: dict | None = None,
) -> dict:
    has = outcome == "correct" if has_speedup is None else has_speedup
    _RID[0] += 1
    d = {c: None for c in RESULT_COLUMNS}
    d.update(
        level=level,
        problem_id=pid,
        name=f"P{pid}",
        model=model,
        sample_id=sample,
        turn=turn,
        outcome=outcome,
        tag="",
        passed=outcome in _PASSED,
        has_speedup=has,
        candidate_ms=cand,
        eager_ms=eager,
        compile_ms=compile_,
        speedup_eager=speedup(eager, cand) if has else None,
        speedup_compile=speedup(compile_, cand) if has else None,
        baselines_ms=baselines_ms or {},
        findings=[],
        result_id=_RID[0],
        correct=outcome in _PASSED,
    )
    return d


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame.from_records(rows, columns=list(RESULT_COLUMNS))


def _group(ms, group, model="m"):
    return next(g for g in ms if g.group == group and g.model == model)


def test_elementary_definitions():
    assert speedup(2.0, 1.0) == 2.0
    assert speedup(None, 1.0) is None and speedup(1.0, 0.0) is None and speedup(1.0, float("nan")) is None
    assert speedups_by_mode(2.0, {"eager": 4.0, "compile:default": 1.0, "compile:x": None}) == {
        "eager": 2.0,
        "compile:default": 0.5,
    }
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean([None, 0.0]) is None
    # fast_p: strict >, denominator = problems in scope (missing ones count 0)
    assert fast_p([True, True, False], [1.0, 1.5, None], 1.0, n_problems=4) == 0.25
    assert fast_p([True, True], [1.0, 1.0], 1.0) == 0.0  # exactly p is not faster
    assert fast_p([True, True], [1.0, 1.0], 0.999) == 1.0
    assert fast_p([], [], 1.0) == 0.0


def test_pass_at_k_known_values():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))
    assert pass_at_k(5, 4, 2) == 1.0  # n - c < k
    assert pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(1, 1, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_headline_metrics_hand_computed():
    # P1 correct 2x eager / 1x compile; P2 correct 0.5x / 0.25x; P3 incorrect; P4 missing.
    rows = [
        _row(1, 1, "correct", eager=2.0, compile_=1.0, cand=1.0),
        _row(1, 2, "correct", eager=1.0, compile_=0.5, cand=2.0),
        _row(1, 3, "incorrect", eager=1.0, compile_=1.0),
    ]
    ms = summarize_run(_frame(rows), _problems(1, 4), n_resamples=200)
    g = _group(ms, "L1")
    assert (g.problems, g.attempted, g.samples, g.passed_samples) == (4, 3, 3, 2)
    assert g.correct_rate.value == 0.5
    assert g.fast_p_eager["0"].value == 0.5
    assert g.fast_p_eager["0.5"].value == 0.25  # 0.5 is not > 0.5
    assert g.fast_p_eager["1"].value == 0.25 and g.faster_eager_rate.value == 0.25
    assert g.fast_p_eager["2"].value == 0.0  # 2.0 is not > 2
    assert g.fast_p_compile["0.8"].value == 0.25
    assert g.fast_p_compile["1"].value == 0.0 and g.faster_compile_rate.value == 0.0  # 1.0x is a tie
    assert g.geomean_speedup_eager.value == pytest.approx(1.0)  # sqrt(2 * 0.5)
    assert g.geomean_speedup_compile.value == pytest.approx(0.5)  # sqrt(1 * 0.25)
    # over all problems, failures and the missing problem count 1.0x
    assert g.geomean_speedup_eager_all.value == pytest.approx((2 * 0.5) ** 0.25)
    assert g.geomean_speedup_compile_all.value == pytest.approx((1 * 0.25) ** 0.25)
    assert g.pass_at_k == {1: pytest.approx(0.5)}
    # intervals bracket the estimate
    assert g.correct_rate.low <= 0.5 <= g.correct_rate.high
    # one level only: no "weighted" group
    assert [x.group for x in ms] == ["L1", "all"]
    assert _group(ms, "all").correct_rate.value == 0.5


def test_no_correct_candidates():
    rows = [_row(1, 1, "incorrect", eager=1.0, compile_=1.0), _row(1, 2, "compile_error")]
    g = _group(summarize_run(_frame(rows), _problems(1, 2), n_resamples=100), "L1")
    assert g.correct_rate.value == 0.0
    assert all(e.value == 0.0 for e in g.fast_p_eager.values())
    assert g.geomean_speedup_eager.value is None and g.geomean_speedup_eager.low is None
    assert g.geomean_speedup_eager_all.value == pytest.approx(1.0)
    assert g.correct_rate.low == 0.0 and g.correct_rate.high == 0.0


def test_empty_run_and_empty_level():
    ms = summarize_run(_frame([]), _problems(1, 3), n_resamples=50)
    g = _group(ms, "L1", model="")
    assert g.correct_rate.value == 0.0 and g.geomean_speedup_eager.value is None
    assert g.geomean_speedup_eager_all.value is None  # no baseline measured at all in this run

    # L1 has results, L2 is in scope but has none
    rows = [_row(1, 1, "correct", eager=4.0, compile_=2.0, cand=1.0), _row(1, 2, "incorrect", eager=1.0)]
    ms = summarize_run(_frame(rows), _problems(1, 2) + _problems(2, 2), n_resamples=100)
    l1, l2, w = _group(ms, "L1"), _group(ms, "L2"), _group(ms, "weighted")
    assert l1.correct_rate.value == 0.5 and l2.correct_rate.value == 0.0
    assert l2.attempted == 0 and l2.geomean_speedup_eager.value is None
    assert l2.geomean_speedup_eager_all.value == pytest.approx(1.0)
    assert w.correct_rate.value == pytest.approx((0.5 * 2 + 0.0 * 2) / 4)
    assert w.geomean_speedup_eager.value == pytest.approx(
        4.0
    )  # L2 has no geomean: left out, weights renormalized
    assert w.weights == {1: 2.0, 2: 2.0}
    assert _group(ms, "all").correct_rate.value == pytest.approx(0.25)


def test_best_turn_and_void_outcomes():
    rows = [
        # sample 0: turn 0 correct 1.5x, turn 1 incorrect, turn 2 correct 3x -> 3x
        _row(1, 1, "correct", eager=3.0, cand=2.0, turn=0),
        _row(1, 1, "incorrect", eager=3.0, turn=1),
        _row(1, 1, "correct", eager=3.0, cand=1.0, turn=2),
        # a cheat is void whatever its time; timing_invalid passes but gives no speedup
        _row(1, 2, "cheat", eager=3.0, cand=0.001),
        _row(1, 3, "timing_invalid", eager=3.0, cand=0.001),
        # policy allowed by the run keeps its speedup
        _row(1, 4, "policy", eager=2.0, cand=1.0, has_speedup=True),
    ]
    scores = sample_scores(_frame(rows))
    s1 = scores[scores.problem_id == 1].iloc[0]
    assert s1.best_turn == 2 and s1.speedup_eager == pytest.approx(3.0) and s1.turns == 3
    assert not scores[scores.problem_id == 2].iloc[0].passed
    s3 = scores[scores.problem_id == 3].iloc[0]
    assert s3.passed and not s3.has_speedup and pd.isna(s3.speedup_eager)
    g = _group(summarize_run(_frame(rows), _problems(1, 4), n_resamples=0), "L1")
    assert g.correct_rate.value == pytest.approx(3 / 4)  # 1, 3 and 4 matched the reference
    assert g.fast_p_eager["1"].value == pytest.approx(2 / 4)  # only 1 and 4 give speedups
    assert g.geomean_speedup_eager.value == pytest.approx(math.sqrt(3.0 * 2.0))
    assert g.correct_rate.low is None  # n_resamples=0: no interval


def test_ties_and_several_samples():
    # two samples of P1 (1.0x tie and 2x), one of P2 (correct 1.0x)
    rows = [
        _row(1, 1, "correct", eager=1.0, cand=1.0, sample=0),
        _row(1, 1, "correct", eager=2.0, cand=1.0, sample=1),
        _row(1, 2, "correct", eager=1.0, cand=1.0, sample=0),
    ]
    g = _group(summarize_run(_frame(rows), _problems(1, 2), n_resamples=0, ks=(1, 2)), "L1")
    assert g.fast_p_eager["1"].value == pytest.approx((0.5 + 0.0) / 2)  # P1: one of two samples beats 1x
    assert g.fast_p_eager["0.8"].value == 1.0
    assert g.geomean_speedup_eager.value == pytest.approx(
        2 ** (1 / 3)
    )  # pooled over the three correct samples
    assert g.pass_at_k == {1: 1.0}  # P2 has one sample only: pass@2 is not defined


def test_per_mode_speedups():
    rows = [
        _row(
            1,
            1,
            "correct",
            eager=2.0,
            compile_=1.0,
            cand=1.0,
            baselines_ms={"compile:default": 1.0, "compile:max-autotune": 0.5},
        ),
        _row(
            1,
            2,
            "correct",
            eager=2.0,
            compile_=4.0,
            cand=1.0,
            baselines_ms={"compile:default": 4.0, "compile:max-autotune": 2.0},
        ),
    ]
    g = _group(summarize_run(_frame(rows), _problems(1, 2), n_resamples=0), "L1")
    assert g.modes["compile:max-autotune"]["geomean"].value == pytest.approx(1.0)  # sqrt(0.5 * 2)
    assert g.modes["compile:max-autotune"]["faster"].value == 0.5
    assert g.modes["compile:default"]["geomean"].value == pytest.approx(2.0)


def test_level_weighted_matches_cuda_agent_table1():
    w = {1: 100, 2: 100, 3: 50}
    # CUDA Agent row of Table 1 (arXiv 2602.24286): per-level and overall figures
    assert round(level_weighted({1: 2.48, 2: 3.27, 3: 1.80}, w, geometric=True), 2) == 2.60
    assert round(level_weighted({1: 1.87, 2: 2.80, 3: 1.52}, w, geometric=True), 2) == 2.11
    assert level_weighted({1: 1.0, 2: 1.0, 3: 0.94}, w, geometric=False) == pytest.approx(0.988)
    assert level_weighted({1: None}, w, geometric=True) is None


def test_weighted_group_uses_geometric_weighting():
    # L1: two problems at 4x; L2: one problem at 1x -> weights 2/1 -> 4^(2/3)
    rows = [
        _row(1, 1, "correct", eager=4.0, cand=1.0),
        _row(1, 2, "correct", eager=4.0, cand=1.0),
        _row(2, 1, "correct", eager=1.0, cand=1.0),
    ]
    ms = summarize_run(_frame(rows), _problems(1, 2) + _problems(2, 1), n_resamples=300)
    w = _group(ms, "weighted")
    assert w.geomean_speedup_eager.value == pytest.approx(4 ** (2 / 3))
    assert w.fast_p_eager["1"].value == pytest.approx((1.0 * 2 + 0.0 * 1) / 3)
    assert w.geomean_speedup_eager.low <= w.geomean_speedup_eager.value <= w.geomean_speedup_eager.high


def test_bootstrap_is_reproducible_and_sane():
    x = [1, 0, 1, 1, 0, 1, 0, 1, 1, 1]
    lo, hi = bootstrap_ci(x)
    assert (lo, hi) == bootstrap_ci(x)
    assert 0.0 <= lo < 0.7 < hi <= 1.0
    assert bootstrap_ci([1, 1, 1]) == (1.0, 1.0)
    assert bootstrap_ci([1]) == (None, None)
    rows = [_row(1, i, "correct" if i % 2 else "incorrect", eager=2.0, cand=1.0) for i in range(1, 21)]
    a = _group(summarize_run(_frame(rows), _problems(1, 20)), "L1")
    b = _group(summarize_run(_frame(rows), _problems(1, 20)), "L1")
    assert a.correct_rate == b.correct_rate
    assert isinstance(a.correct_rate, Estimate) and a.correct_rate.low < 0.5 < a.correct_rate.high


def test_exclude_degenerate_problems_from_scope():
    rows = [_row(1, 1, "correct", eager=2.0, cand=1.0), _row(1, 2, "incorrect", eager=1.0)]
    g = _group(summarize_run(_frame(rows), _problems(1, 2), exclude={"L1/2"}, n_resamples=0), "L1")
    assert g.problems == 1 and g.correct_rate.value == 1.0


def test_fast_p_curve_steps():
    rows = [
        _row(1, 1, "correct", eager=2.0, cand=1.0),
        _row(1, 2, "correct", eager=1.0, cand=1.0),
        _row(1, 3, "incorrect"),
    ]
    scores = sample_scores(_frame(rows))
    curve = fast_p_curve(scores, _problems(1, 4), "eager")
    assert curve[0] == (0.0, 0.5)
    assert curve[1] == (1.0, 0.25) and curve[2] == (2.0, 0.0)


def test_to_dict_is_plain():
    import json

    rows = [_row(1, 1, "correct", eager=2.0, cand=1.0)]
    g = summarize_run(_frame(rows), _problems(1, 2), n_resamples=10)[0]
    json.dumps(g.to_dict())
