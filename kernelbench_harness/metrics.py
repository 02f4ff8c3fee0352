"""Metrics of one run: speedups, fast_p, faster-than-baseline rates, geometric means, pass@k, CIs.

Definitions and their sources:

- ``speedup = baseline_ms / candidate_ms`` (KernelBench), given only where
  :attr:`EvalResult.has_speedup` is true (correct candidates, and allowed policy marks); a
  ``cheat`` or ``timing_invalid`` verdict gives no speedup.
- ``fast_p = #(correct and speedup > p) / #problems in scope`` with a strict ``>`` and failures and
  missing problems counted as 0 (KernelBench), for p in {0, 0.5, 0.8, 1, 1.5, 2}. The
  faster-than-eager and faster-than-torch.compile rates are ``fast_1`` against each baseline (CUDA
  Agent's "faster": correct and faster than the baseline).
- Geometric-mean speedup over correct candidates (KernelBench, CUDA Agent), and over all problems
  in scope with every failed or missing problem counted as :data:`FAILURE_SPEEDUP` (1.0x: the user
  keeps the baseline). Correct but slower candidates keep their speedup below 1 in both.
- pass@k by the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` averaged over problems (Chen et al.
  2021, "Evaluating Large Language Models Trained on Code"; used by KernelBench).
- Per level, over all levels pooled, and level-weighted as CUDA Agent reports its overall figure
  (arXiv 2602.24286, Table 1): rates are weighted arithmetic means of the per-level rates and
  geometric means are weighted geometric means of the per-level geomeans, the weights being the
  levels' problem counts (100/100/50 on KernelBench). Table 1's own figures satisfy exactly this:
  CUDA Agent's 2.48x / 3.27x / 1.80x per level give 2.60x overall.
- 95% confidence intervals: percentile bootstrap over problems (Efron & Tibshirani 1993), a fixed
  seed and 2000 resamples; the level-weighted figures resample within each level (stratified).

Granularity: a sample's score is its best correct turn (lowest candidate time among turns with a
speedup). With several samples per problem, a problem's rate is the mean over its samples (the
expected single-sample rate; with one sample per problem this is KernelBench's definition), the
geomean over correct candidates pools every correct sample, and the bootstrap resamples problems
with all their samples. Metric functions take one run (one protocol) at a time: results of
different protocols are never mixed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .errors import ConfigError
from .core import Problem

__all__ = [
    "FAILURE_SPEEDUP",
    "FAST_P_THRESHOLDS",
    "PASSED_OUTCOMES",
    "Estimate",
    "GroupMetrics",
    "bootstrap_ci",
    "fast_p",
    "fast_p_curve",
    "geometric_mean",
    "level_weighted",
    "pass_at_k",
    "problem_scores",
    "sample_scores",
    "speedup",
    "speedups_by_mode",
    "summarize_run",
]

FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
"""KernelBench's fast_p thresholds."""

FAILURE_SPEEDUP = 1.0
"""Speedup a failed or missing problem counts as in the geomean "over all problems" (the baseline kept)."""

PASSED_OUTCOMES = frozenset({"correct", "policy", "timing_invalid"})
"""Outcomes whose outputs matched the reference: they count as correct in the correctness rate and
pass@k (``Outcome.passed``); only those with ``has_speedup`` give a speedup."""

_CI_LEVEL = 0.95
_N_RESAMPLES = 2000
_SEED = 20260310


# --- elementary definitions -------------------------------------------------------------------


def speedup(baseline_ms: float | None, candidate_ms: float | None) -> float | None:
    """``baseline_ms / candidate_ms`` (KernelBench's definition), None when either is missing or not > 0.

    Args:
        baseline_ms: baseline time (eager or a torch.compile mode), ms.
        candidate_ms: candidate time, ms.
    """
    if baseline_ms is None or candidate_ms is None:
        return None
    if not (candidate_ms > 0 and baseline_ms > 0) or not (
        math.isfinite(candidate_ms) and math.isfinite(baseline_ms)
    ):
        return None
    return float(baseline_ms) / float(candidate_ms)


def speedups_by_mode(
    candidate_ms: float | None, baselines_ms: Mapping[str, float | None]
) -> dict[str, float]:
    """Speedup against each baseline mode (``"eager"``, ``"compile:default"``, ``"compile:max-autotune"``...).

    Args:
        candidate_ms: candidate time, ms.
        baselines_ms: mode -> baseline time, ms.

    Returns:
        mode -> ``baseline_ms / candidate_ms`` for every mode where both times are usable.
    """
    out: dict[str, float] = {}
    for mode, ms in baselines_ms.items():
        s = speedup(ms, candidate_ms)
        if s is not None:
            out[mode] = s
    return out


def fast_p(
    correct: Sequence[bool], speedups: Sequence[float | None], p: float, n_problems: int | None = None
) -> float:
    """KernelBench's fast_p: the share of problems solved correctly with ``speedup > p`` (strict).

    Args:
        correct: per problem, whether its candidate gives a speedup (correct and not void).
        speedups: per problem, the speedup (None where there is none).
        p: the threshold.
        n_problems: the number of problems in scope (default ``len(correct)``); problems without a
            candidate count as failures.

    Returns:
        A rate in [0, 1]; 0.0 for an empty scope.
    """
    n = len(correct) if n_problems is None else n_problems
    if n <= 0:
        return 0.0
    hits = sum(1 for c, s in zip(correct, speedups) if c and s is not None and s > p)
    return hits / n


def geometric_mean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive finite ``values`` (None and non-positive ones skipped); None if none."""
    logs = [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not logs:
        return None
    return math.exp(sum(logs) / len(logs))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator of Chen et al. (2021): ``1 - C(n-c, k) / C(n, k)``.

    Args:
        n: samples drawn for the problem.
        c: of those, how many passed.
        k: the budget.

    Raises:
        ValueError: ``k > n``, or ``c`` outside ``[0, n]``.
    """
    if not 0 <= c <= n:
        raise ValueError(f"c={c} must lie in [0, n={n}]")
    if k > n or k < 1:
        raise ValueError(f"pass@{k} needs 1 <= k <= n (n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True, slots=True)
class Estimate:
    """A point estimate with its 95% bootstrap interval.

    Attributes:
        value: the estimate (None when undefined, e.g. a geomean with no correct candidate).
        low, high: percentile-bootstrap 95% interval (None when undefined or fewer than 2 problems).
        n: problems behind it.
    """

    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n}


def _percentile_ci(draws: np.ndarray) -> tuple[float | None, float | None]:
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return None, None
    a = (1 - _CI_LEVEL) / 2 * 100
    lo, hi = np.percentile(draws, [a, 100 - a])
    return float(lo), float(hi)


def bootstrap_ci(
    per_problem: Sequence[float], *, n_resamples: int = _N_RESAMPLES, seed: int = _SEED
) -> tuple[float | None, float | None]:
    """95% percentile-bootstrap interval of the mean of ``per_problem`` (resampling problems).

    Args:
        per_problem: one value per problem (e.g. 0/1 solved, or a problem's mean over samples).
        n_resamples: bootstrap resamples.
        seed: RNG seed (fixed, so reports are reproducible).

    Returns:
        (low, high), or (None, None) with fewer than 2 problems.
    """
    x = np.asarray(per_problem, dtype=float)
    if x.size < 2:
        return None, None
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_resamples, x.size))
    return _percentile_ci(x[idx].mean(axis=1))


# --- from stored results to scores ----------------------------------------------------------------


_SCORE_COLUMNS = [
    "level",
    "problem_id",
    "name",
    "model",
    "sample_id",
    "turns",
    "best_turn",
    "outcome",
    "tag",
    "passed",
    "has_speedup",
    "candidate_ms",
    "eager_ms",
    "compile_ms",
    "speedup_eager",
    "speedup_compile",
    "speedups_by_mode",
    "result_id",
    "flagged_for_review",
]


def sample_scores(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per sample: its best correct turn, else its last passed turn, else its last turn.

    Args:
        frame: ``Store.results_frame`` (one row per attempt).

    Returns:
        Columns level, problem_id, name, model, sample_id, turns (count), best_turn, outcome, tag,
        passed (any turn's outputs matched), has_speedup, candidate_ms, eager_ms, compile_ms,
        speedup_eager, speedup_compile (of the best turn; NaN without a speedup), speedups_by_mode
        (dict mode -> speedup against every recorded baseline mode), result_id,
        flagged_for_review (a speedup above 10x, KernelBench's review threshold).
    """
    if frame is None or len(frame) == 0:
        return pd.DataFrame(columns=_SCORE_COLUMNS)
    rows = []
    for key, g in frame.groupby(["level", "problem_id", "model", "sample_id"], sort=True):
        g = g.sort_values("turn")
        passed = g["outcome"].isin(PASSED_OUTCOMES)
        with_speedup = g[g["has_speedup"].astype(bool) & g["candidate_ms"].notna()]
        if len(with_speedup):
            best = with_speedup.sort_values(["candidate_ms", "turn"]).iloc[0]
        elif passed.any():
            best = g[passed].iloc[-1]
        else:
            best = g.iloc[-1]
        has = bool(best["has_speedup"]) and _num(best["candidate_ms"]) is not None
        modes: dict[str, float] = {}
        if has:
            base = dict(best.get("baselines_ms") or {})
            base.setdefault("eager", _num(best["eager_ms"]))
            modes = speedups_by_mode(_num(best["candidate_ms"]), base)
        se = _num(best["speedup_eager"]) if has else None
        sc = _num(best["speedup_compile"]) if has else None
        rows.append(
            {
                "level": int(key[0]),
                "problem_id": int(key[1]),
                "name": best.get("name", ""),
                "model": key[2],
                "sample_id": int(key[3]),
                "turns": len(g),
                "best_turn": int(best["turn"]),
                "outcome": best["outcome"],
                "tag": best["tag"],
                "passed": bool(passed.any()),
                "has_speedup": has,
                "candidate_ms": _num(best["candidate_ms"]),
                "eager_ms": _num(best["eager_ms"]),
                "compile_ms": _num(best["compile_ms"]),
                "speedup_eager": se,
                "speedup_compile": sc,
                "speedups_by_mode": modes,
                "result_id": int(best["result_id"]),
                "flagged_for_review": any(v is not None and v > 10 for v in (se, sc)),
            }
        )
    return pd.DataFrame.from_records(rows, columns=_SCORE_COLUMNS)


def problem_scores(
    scores: pd.DataFrame, problems: Sequence[Problem], model: str | None = None
) -> pd.DataFrame:
    """One row per problem in scope with its best sample (for per-problem tables).

    Args:
        scores: :func:`sample_scores` output.
        problems: the run's scope.
        model: keep this model's samples only (None: all).

    Returns:
        Columns key, level, problem_id, name, samples, passed_samples, plus the best sample's
        columns from :func:`sample_scores` (outcome "missing" where the problem has no sample).
    """
    if model is not None and len(scores):
        scores = scores[scores["model"] == model]
    by_key: dict[tuple[int, int], pd.DataFrame] = (
        {(int(k[0]), int(k[1])): g for k, g in scores.groupby(["level", "problem_id"])} if len(scores) else {}
    )
    rows = []
    for p in problems:
        g = by_key.get((p.level, p.problem_id))
        base = {"key": p.key, "level": p.level, "problem_id": p.problem_id, "name": p.name}
        if g is None or len(g) == 0:
            rows.append(
                {
                    **base,
                    "samples": 0,
                    "passed_samples": 0,
                    "outcome": "missing",
                    "tag": "",
                    "model": model,
                    "sample_id": None,
                    "passed": False,
                    "has_speedup": False,
                    "result_id": None,
                    "flagged_for_review": False,
                    "speedups_by_mode": {},
                }
            )
            continue
        ok = g[g["has_speedup"]]
        best = (
            ok.sort_values("candidate_ms").iloc[0]
            if len(ok)
            else (g[g["passed"]].iloc[0] if g["passed"].any() else g.iloc[0])
        )
        d = best.to_dict()
        d.update(base)
        d["samples"] = len(g)
        d["passed_samples"] = int(g["passed"].sum())
        rows.append(d)
    return pd.DataFrame.from_records(rows)


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


# --- aggregation ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupMetrics:
    """Headline metrics of one model on one group of problems.

    Attributes:
        model: the model.
        group: ``"L1"`` .. ``"L4"``, ``"all"`` (levels pooled) or ``"weighted"`` (CUDA Agent's
            level-weighted overall).
        level: the level for per-level groups, else None.
        problems: problems in scope (fast_p's denominator).
        attempted: problems with at least one recorded sample.
        samples: samples recorded.
        passed_samples: samples whose outputs matched (best turn).
        correct_rate: share of problems solved correctly (mean over samples per problem).
        faster_eager_rate, faster_compile_rate: fast_1 against eager and torch.compile.
        geomean_speedup_eager, geomean_speedup_compile: over correct candidates.
        geomean_speedup_eager_all, geomean_speedup_compile_all: over all problems in scope, a
            failure or missing problem counted as :data:`FAILURE_SPEEDUP`.
        fast_p_eager, fast_p_compile: threshold (as ``str(p)``) -> fast_p.
        pass_at_k: k -> pass@k (only the k every attempted problem has samples for).
        modes: baseline mode -> {"geomean": Estimate over correct, "faster": Estimate fast_1}.
        weights: level -> weight used (``"weighted"`` group only).
    """

    model: str
    group: str
    level: int | None
    problems: int
    attempted: int
    samples: int
    passed_samples: int
    correct_rate: Estimate
    faster_eager_rate: Estimate
    faster_compile_rate: Estimate
    geomean_speedup_eager: Estimate
    geomean_speedup_compile: Estimate
    geomean_speedup_eager_all: Estimate
    geomean_speedup_compile_all: Estimate
    fast_p_eager: dict[str, Estimate] = field(default_factory=dict)
    fast_p_compile: dict[str, Estimate] = field(default_factory=dict)
    pass_at_k: dict[int, float] = field(default_factory=dict)
    modes: dict[str, dict[str, Estimate]] = field(default_factory=dict)
    weights: dict[int, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (Estimates as dicts)."""

        def est(e: Estimate) -> dict[str, Any]:
            return e.to_dict()

        return {
            "model": self.model,
            "group": self.group,
            "level": self.level,
            "problems": self.problems,
            "attempted": self.attempted,
            "samples": self.samples,
            "passed_samples": self.passed_samples,
            "correct_rate": est(self.correct_rate),
            "faster_eager_rate": est(self.faster_eager_rate),
            "faster_compile_rate": est(self.faster_compile_rate),
            "geomean_speedup_eager": est(self.geomean_speedup_eager),
            "geomean_speedup_compile": est(self.geomean_speedup_compile),
            "geomean_speedup_eager_all": est(self.geomean_speedup_eager_all),
            "geomean_speedup_compile_all": est(self.geomean_speedup_compile_all),
            "fast_p_eager": {k: est(v) for k, v in self.fast_p_eager.items()},
            "fast_p_compile": {k: est(v) for k, v in self.fast_p_compile.items()},
            "pass_at_k": {str(k): v for k, v in self.pass_at_k.items()},
            "modes": {m: {k: est(v) for k, v in d.items()} for m, d in self.modes.items()},
            "weights": {str(k): v for k, v in self.weights.items()},
        }


def _p_key(p: float) -> str:
    return f"{p:g}"


class _Arrays:
    """Per-problem arrays of one model on one set of problems (what every statistic is built from)."""

    def __init__(
        self,
        scores: pd.DataFrame,
        keys: Sequence[tuple[int, int]],
        ps: Sequence[float],
        failure_speedup: float,
        modes: Sequence[str],
    ) -> None:
        n = len(keys)
        self.n = n
        pos = {k: i for i, k in enumerate(keys)}
        self.nsamp = np.zeros(n)
        self.npass = np.zeros(n, dtype=int)
        self.correct = np.zeros(n)
        self.fast = {(b, p): np.zeros(n) for b in ("eager", "compile") for p in ps}
        self.logsum = {b: np.zeros(n) for b in ("eager", "compile", *modes)}
        self.cnt = {b: np.zeros(n) for b in ("eager", "compile", *modes)}
        self.faster_mode = {m: np.zeros(n) for m in modes}
        self.alllog = {b: np.zeros(n) for b in ("eager", "compile")}
        fail_log = math.log(failure_speedup)
        if len(scores):
            for (lv, pid), g in scores.groupby(["level", "problem_id"]):
                i = pos.get((int(lv), int(pid)))
                if i is None:
                    continue
                m = len(g)
                self.nsamp[i] = m
                self.npass[i] = int(g["passed"].sum())
                self.correct[i] = g["passed"].mean()
                sp = {
                    "eager": g["speedup_eager"].map(_num).tolist(),
                    "compile": g["speedup_compile"].map(_num).tolist(),
                }
                has = g["has_speedup"].astype(bool).tolist()
                for b in ("eager", "compile"):
                    vals = sp[b]
                    for p in ps:
                        self.fast[(b, p)][i] = (
                            sum(1 for h, s in zip(has, vals) if h and s is not None and s > p) / m
                        )
                    logs = [math.log(s) for h, s in zip(has, vals) if h and s is not None and s > 0]
                    self.logsum[b][i] = sum(logs)
                    self.cnt[b][i] = len(logs)
                    all_logs = [
                        math.log(s) if (h and s is not None and s > 0) else fail_log
                        for h, s in zip(has, vals)
                        if not (h and s is None)
                    ]
                    self.alllog[b][i] = sum(all_logs) / len(all_logs) if all_logs else fail_log
                for mode in modes:
                    vals_m = [(d or {}).get(mode) if h else None for h, d in zip(has, g["speedups_by_mode"])]
                    logs = [math.log(s) for s in vals_m if s is not None and s > 0]
                    self.logsum[mode][i] = sum(logs)
                    self.cnt[mode][i] = len(logs)
                    self.faster_mode[mode][i] = sum(1 for s in vals_m if s is not None and s > 1.0) / m
        if n:
            for b in ("eager", "compile"):
                missing = self.nsamp == 0
                self.alllog[b][missing] = fail_log

    # statistics on an index array (..., n) -> (...)
    @staticmethod
    def rate(x: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
        return x.mean(axis=-1) if idx is None else x[idx].mean(axis=-1)

    @staticmethod
    def geo(logsum: np.ndarray, cnt: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
        s = logsum.sum(axis=-1) if idx is None else logsum[idx].sum(axis=-1)
        c = cnt.sum(axis=-1) if idx is None else cnt[idx].sum(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(c > 0, np.exp(s / np.where(c > 0, c, 1)), np.nan)

    @staticmethod
    def geo_all(alllog: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
        return np.exp(alllog.mean(axis=-1) if idx is None else alllog[idx].mean(axis=-1))

    def stats(
        self, idx: np.ndarray | None, ps: Sequence[float], modes: Sequence[str]
    ) -> dict[str, np.ndarray]:
        """Every statistic, on all problems (``idx`` None) or on resamples ``idx`` of shape (B, n)."""
        out = {"correct_rate": self.rate(self.correct, idx)}
        for b in ("eager", "compile"):
            for p in ps:
                out[f"fast_{b}_{_p_key(p)}"] = self.rate(self.fast[(b, p)], idx)
            out[f"geo_{b}"] = self.geo(self.logsum[b], self.cnt[b], idx)
            out[f"geoall_{b}"] = self.geo_all(self.alllog[b], idx)
        for m in modes:
            out[f"mgeo_{m}"] = self.geo(self.logsum[m], self.cnt[m], idx)
            out[f"mfast_{m}"] = self.rate(self.faster_mode[m], idx)
        return out

    def pass_at(self, ks: Sequence[int]) -> dict[int, float]:
        attempted = self.nsamp > 0
        out: dict[int, float] = {}
        if self.n == 0 or not attempted.any():
            return out
        min_n = int(self.nsamp[attempted].min())
        for k in ks:
            if k > min_n:
                continue
            vals = [
                pass_at_k(int(self.nsamp[i]), int(self.npass[i]), k) if attempted[i] else 0.0
                for i in range(self.n)
            ]
            out[k] = float(np.mean(vals))
        return out


def _modes_of(scores: pd.DataFrame) -> list[str]:
    modes: set[str] = set()
    if len(scores):
        for d in scores["speedups_by_mode"]:
            modes.update((d or {}).keys())
    return sorted(m for m in modes if m != "eager")


def _estimate(point: np.ndarray, draws: np.ndarray | None, n: int, defined: bool = True) -> Estimate:
    v = float(point)
    if not defined or not math.isfinite(v):
        return Estimate(None, None, None, n)
    lo, hi = (None, None) if draws is None else _percentile_ci(draws)
    return Estimate(v, lo, hi, n)


def _group(
    model: str,
    group: str,
    level: int | None,
    arr: _Arrays,
    ps: Sequence[float],
    ks: Sequence[int],
    modes: Sequence[str],
    n_resamples: int,
    seed: int,
    has_base: Mapping[str, bool],
) -> GroupMetrics:
    point = arr.stats(None, ps, modes) if arr.n else None
    draws = None
    if arr.n >= 2 and n_resamples > 0:
        idx = np.random.default_rng(seed).integers(0, arr.n, size=(n_resamples, arr.n))
        draws = arr.stats(idx, ps, modes)
    return _assemble(
        model,
        group,
        level,
        arr.n,
        int((arr.nsamp > 0).sum()),
        int(arr.nsamp.sum()),
        int(arr.npass.sum()),
        point,
        draws,
        ps,
        modes,
        arr.pass_at(ks),
        has_base,
        {},
    )


def _assemble(
    model: str,
    group: str,
    level: int | None,
    n: int,
    attempted: int,
    samples: int,
    passed: int,
    point: dict[str, np.ndarray] | None,
    draws: dict[str, np.ndarray] | None,
    ps: Sequence[float],
    modes: Sequence[str],
    pak: dict[int, float],
    has_base: Mapping[str, bool],
    weights: dict[int, float],
) -> GroupMetrics:
    def e(name: str, defined: bool = True) -> Estimate:
        if point is None:
            return Estimate(None, None, None, n)
        return _estimate(point[name], None if draws is None else draws[name], n, defined)

    return GroupMetrics(
        model=model,
        group=group,
        level=level,
        problems=n,
        attempted=attempted,
        samples=samples,
        passed_samples=passed,
        correct_rate=e("correct_rate"),
        faster_eager_rate=e(f"fast_eager_{_p_key(1.0)}") if 1.0 in ps else Estimate(None, n=n),
        faster_compile_rate=e(f"fast_compile_{_p_key(1.0)}") if 1.0 in ps else Estimate(None, n=n),
        geomean_speedup_eager=e("geo_eager"),
        geomean_speedup_compile=e("geo_compile"),
        geomean_speedup_eager_all=e("geoall_eager", has_base.get("eager", False)),
        geomean_speedup_compile_all=e("geoall_compile", has_base.get("compile", False)),
        fast_p_eager={_p_key(p): e(f"fast_eager_{_p_key(p)}") for p in ps},
        fast_p_compile={_p_key(p): e(f"fast_compile_{_p_key(p)}") for p in ps},
        pass_at_k=pak,
        modes={m: {"geomean": e(f"mgeo_{m}"), "faster": e(f"mfast_{m}")} for m in modes},
        weights=weights,
    )


def level_weighted(
    per_level: Mapping[int, float | None], weights: Mapping[int, float], *, geometric: bool
) -> float | None:
    """CUDA Agent's level-weighted overall figure (arXiv 2602.24286, Table 1).

    Args:
        per_level: level -> the level's figure (None levels are left out and the weights renormalized).
        weights: level -> weight (the levels' problem counts: 100/100/50 on KernelBench).
        geometric: True for geomean speedups (weighted geometric mean), False for rates (weighted
            arithmetic mean).

    Returns:
        The weighted figure, or None when no level has one.
    """
    pairs = [
        (weights.get(lv, 0.0), v) for lv, v in per_level.items() if v is not None and weights.get(lv, 0.0) > 0
    ]
    if geometric:
        pairs = [(w, v) for w, v in pairs if v > 0]
    total = sum(w for w, _ in pairs)
    if total <= 0:
        return None
    if geometric:
        return math.exp(sum(w * math.log(v) for w, v in pairs) / total)
    return sum(w * v for w, v in pairs) / total


def _weighted_arrays(
    per_level: Mapping[int, np.ndarray], weights: Mapping[int, float], geometric: bool
) -> np.ndarray:
    levels = [lv for lv in per_level if weights.get(lv, 0) > 0]
    stack = np.stack([np.asarray(per_level[lv], dtype=float) for lv in levels])  # (L, ...)
    w = np.array([weights[lv] for lv in levels], dtype=float).reshape((-1,) + (1,) * (stack.ndim - 1))
    ok = np.isfinite(stack) & ((stack > 0) if geometric else True)
    wsum = np.where(ok, w, 0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        if geometric:
            num = np.where(ok, w * np.log(np.where(ok, stack, 1.0)), 0).sum(axis=0)
            return np.where(wsum > 0, np.exp(num / np.where(wsum > 0, wsum, 1)), np.nan)
        num = np.where(ok, w * np.where(ok, stack, 0), 0).sum(axis=0)
        return np.where(wsum > 0, num / np.where(wsum > 0, wsum, 1), np.nan)


def summarize_run(
    frame: pd.DataFrame,
    problems: Sequence[Problem],
    *,
    models: Sequence[str] | None = None,
    exclude: Iterable[str] = (),
    ps: Sequence[float] = FAST_P_THRESHOLDS,
    ks: Sequence[int] = (1, 5, 10),
    failure_speedup: float = FAILURE_SPEEDUP,
    weights: Mapping[int, float] | None = None,
    n_resamples: int = _N_RESAMPLES,
    seed: int = _SEED,
) -> list[GroupMetrics]:
    """Headline metrics of one run per model: per level, all levels pooled, and level-weighted.

    Args:
        frame: ``Store.results_frame(run)`` (one run, hence one protocol).
        problems: the run's scope (``Store.run_problems``); every level in it gets a group, even
            one with no recorded sample.
        models: models to report (default: every model in ``frame``, or ``[""]`` if it is empty).
        exclude: problem keys (``"L2/83"``) left out of the scope, e.g. problems flagged
            ``degenerate`` by the audit (reported apart).
        ps: fast_p thresholds.
        ks: pass@k budgets (a k above some attempted problem's sample count is left out).
        failure_speedup: what a failure counts as in the geomean over all problems.
        weights: level -> weight of the level-weighted overall (default: the scope's problem
            count per level, i.e. 100/100/50 on KernelBench levels 1-3).
        n_resamples: bootstrap resamples (0 disables intervals).
        seed: bootstrap seed.

    Returns:
        For each model: one :class:`GroupMetrics` per level (ascending), then ``"all"``, then
        ``"weighted"`` when the scope spans more than one level.
    """
    if frame is not None and len(frame) and "protocol_fingerprint" in frame.columns:
        fps = set(frame["protocol_fingerprint"].dropna().unique())
        if len(fps) > 1:
            raise ConfigError("these results come from runs with different protocols and cannot share one table",
                              fix="summarize each protocol's runs separately (results of different protocols "
                                  "are never mixed)")
    excluded = set(exclude)
    scope = [p for p in problems if p.key not in excluded]
    scores = sample_scores(frame)
    if len(scores) and excluded:
        keys = "L" + scores["level"].astype(str) + "/" + scores["problem_id"].astype(str)
        scores = scores[~keys.isin(excluded)]
    if models is None:
        models = sorted(scores["model"].unique().tolist()) if len(scores) else [""]
    levels = sorted({p.level for p in scope})
    w = (
        dict(weights)
        if weights is not None
        else {lv: float(sum(1 for p in scope if p.level == lv)) for lv in levels}
    )
    modes = _modes_of(scores)
    # the geomean over all problems needs the baseline to have been measured in this run at all
    has_base = {b: bool(len(frame)) and bool(frame[f"{b}_ms"].notna().any()) for b in ("eager", "compile")}
    out: list[GroupMetrics] = []
    for mi, model in enumerate(models):
        ms = scores[scores["model"] == model] if len(scores) else scores
        per_level_arr: dict[int, _Arrays] = {}
        for li, lv in enumerate(levels):
            keys = [(p.level, p.problem_id) for p in scope if p.level == lv]
            arr = _Arrays(ms, keys, ps, failure_speedup, modes)
            per_level_arr[lv] = arr
            out.append(
                _group(model, f"L{lv}", lv, arr, ps, ks, modes, n_resamples, seed + 7919 * mi + li, has_base)
            )
        all_keys = [(p.level, p.problem_id) for p in scope]
        arr_all = _Arrays(ms, all_keys, ps, failure_speedup, modes)
        out.append(
            _group(model, "all", None, arr_all, ps, ks, modes, n_resamples, seed + 7919 * mi + 97, has_base)
        )
        if len(levels) > 1:
            out.append(
                _weighted_group(
                    model,
                    per_level_arr,
                    w,
                    ps,
                    ks,
                    modes,
                    n_resamples,
                    seed + 7919 * mi + 389,
                    arr_all,
                    has_base,
                )
            )
    return out


def _weighted_group(
    model: str,
    per_level: Mapping[int, _Arrays],
    weights: Mapping[int, float],
    ps: Sequence[float],
    ks: Sequence[int],
    modes: Sequence[str],
    n_resamples: int,
    seed: int,
    arr_all: _Arrays,
    has_base: Mapping[str, bool],
) -> GroupMetrics:
    rng = np.random.default_rng(seed)
    points = {lv: a.stats(None, ps, modes) for lv, a in per_level.items() if a.n}
    draws_l = {}
    if n_resamples > 0 and sum(a.n for a in per_level.values()) >= 2:
        for lv, a in per_level.items():
            if a.n >= 1:
                draws_l[lv] = a.stats(rng.integers(0, a.n, size=(n_resamples, a.n)), ps, modes)
    names = next(iter(points.values())).keys() if points else []
    point: dict[str, np.ndarray] = {}
    draws: dict[str, np.ndarray] | None = {} if draws_l and len(draws_l) == len(points) else None
    for name in names:
        geometric = name.startswith(("geo", "mgeo"))
        point[name] = _weighted_arrays({lv: p[name] for lv, p in points.items()}, weights, geometric)
        if draws is not None:
            draws[name] = _weighted_arrays({lv: d[name] for lv, d in draws_l.items()}, weights, geometric)
    n = sum(a.n for a in per_level.values())
    used = {lv: float(weights.get(lv, 0.0)) for lv in per_level}
    return _assemble(
        model,
        "weighted",
        None,
        n,
        int((arr_all.nsamp > 0).sum()),
        int(arr_all.nsamp.sum()),
        int(arr_all.npass.sum()),
        point or None,
        draws,
        ps,
        modes,
        arr_all.pass_at(ks),
        has_base,
        used,
    )


def fast_p_curve(
    scores: pd.DataFrame,
    problems: Sequence[Problem],
    baseline: str = "eager",
    *,
    model: str | None = None,
    exclude: Iterable[str] = (),
) -> list[tuple[float, float]]:
    """fast_p as a function of p: the points where the step function drops, for charts.

    Args:
        scores: :func:`sample_scores` output.
        problems: the scope.
        baseline: ``"eager"`` or ``"compile"``.
        model: one model's samples (None: all, as one pool).
        exclude: problem keys left out of the scope.

    Returns:
        ``[(p, fast_p(p))]`` with p = 0 first and then each distinct speedup (fast_p just *after*
        p drops, being strict); fast_p(p) for any p is the value of the last point with ``p_i <= p``.
    """
    excluded = set(exclude)
    scope = {(p.level, p.problem_id) for p in problems if p.key not in excluded}
    n = len(scope)
    if n == 0:
        return [(0.0, 0.0)]
    col = f"speedup_{baseline}"
    s = scores if model is None or not len(scores) else scores[scores["model"] == model]
    weights: list[tuple[float, float]] = []  # (speedup, weight 1/(n samples of its problem) / n)
    if len(s):
        for (lv, pid), g in s.groupby(["level", "problem_id"]):
            if (int(lv), int(pid)) not in scope:
                continue
            m = len(g)
            for h, v in zip(g["has_speedup"], g[col]):
                v = _num(v)
                if h and v is not None:
                    weights.append((v, 1.0 / m / n))
    weights.sort()
    total = sum(wt for _, wt in weights)
    points = [(0.0, sum(wt for v, wt in weights if v > 0))]
    remaining = total
    for v, wt in weights:
        remaining -= wt
        if points[-1][0] == v:
            points[-1] = (v, max(0.0, remaining))
        else:
            points.append((v, max(0.0, remaining)))
    return points
