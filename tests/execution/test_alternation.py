"""Issue 3: with the ``kbench`` protocol, a job that measures its baselines times the candidate, eager
and torch.compile in interleaved blocks (``alternate_rounds``) and pools each one's samples; cached
baselines are not re-timed, and protocols without alternation time each once, one after the other."""

from __future__ import annotations

from typing import Any

from kernelbench_harness.core import Backend, Candidate, Outcome
from kernelbench_harness.execution.device import DeviceEvaluator, EvalJob
from kernelbench_harness.protocols import get_protocol

from .evalkit import AFFINE, FAST_KBENCH, STAND_IN_BASELINES, describe
from .test_outcomes import TRITON_OK


def _job(protocol: Any, baselines: dict) -> EvalJob:
    cand = Candidate(AFFINE.level, AFFINE.problem_id, TRITON_OK, Backend.detect(TRITON_OK))
    return EvalJob(AFFINE, cand, protocol, run_seed=11, baselines=baselines, timeout_s=60, build_timeout_s=60)


def _windows(res) -> list[tuple[float, str]]:
    out = [(w["start"], "candidate") for w in res.extra["timing_windows"]]
    for mode, info in (res.extra.get("baseline_info") or {}).items():
        out += [(w["start"], mode) for w in (info or {}).get("windows", [])]
    return [what for _, what in sorted(out)]


def test_candidate_eager_and_compile_alternate_when_baselines_are_measured(evaluator: DeviceEvaluator) -> None:
    assert FAST_KBENCH.alternate_rounds == 3
    res = evaluator.evaluate(_job(FAST_KBENCH, {}))
    assert res.outcome is Outcome.CORRECT, describe(res)
    assert _windows(res) == ["candidate", "eager", "compile:default"] * 3
    assert res.extra["timing_info"]["stopped"] == "alternated:3"
    blocks = res.extra["timing_info"]["blocks"]
    assert len(blocks) == 3 and res.candidate.n == sum(b["n"] for b in blocks)  # one pool of every sample
    assert len(res.candidate.samples_ms) == res.candidate.n
    for mode in ("eager", "compile:default"):
        stats = res.extra["baselines"][mode]
        info = res.extra["baseline_info"][mode]
        assert info["stopped"] == "alternated:3" and stats["n"] == sum(b["n"] for b in info["blocks"])
    assert res.eager_ms is not None and res.compile_ms is not None and res.speedup_compile is not None


def test_cached_baselines_are_not_timed_again_and_the_candidate_is_timed_once(evaluator: DeviceEvaluator) -> None:
    res = evaluator.evaluate(_job(FAST_KBENCH, dict(STAND_IN_BASELINES)))
    assert res.outcome is Outcome.CORRECT, describe(res)
    assert _windows(res) == ["candidate"]
    assert res.extra["timing_info"]["stopped"] != "alternated:3"


def test_protocols_without_alternation_time_each_once_in_turn(evaluator: DeviceEvaluator) -> None:
    kb = get_protocol("kernelbench", warmup=1, trials=4, max_trials=4)
    assert kb.alternate_rounds == 1
    res = evaluator.evaluate(_job(kb, {}))
    assert res.candidate is not None, describe(res)
    assert _windows(res) == ["candidate", "eager", "compile:default"]


def test_a_content_keyed_cache_gains_nothing_across_blocks(evaluator: DeviceEvaluator) -> None:
    """EXPLOITS K-16: the input refresh numbers trials across blocks, so no input values repeat from one
    block to the next and a cache keyed on the contents never serves a timed call."""
    from .evalkit import CANDIDATES

    src = (CANDIDATES / "k16_content.py").read_text()
    honest_src = (CANDIDATES / "k16_version.py").read_text().replace("if key in self.cache:", "if False:")

    def run(source: str, seed: int):
        cand = Candidate(AFFINE.level, AFFINE.problem_id, source, Backend.detect(source))
        return evaluator.evaluate(EvalJob(AFFINE, cand, FAST_KBENCH, run_seed=seed, baselines={}, timeout_s=60,
                                          build_timeout_s=60))

    honest, cached = run(honest_src, 13), run(src, 14)  # own seeds: each measures (and alternates) baselines
    assert honest.candidate is not None, describe(honest)
    assert cached.outcome in (Outcome.CORRECT, Outcome.TIMING_INVALID, Outcome.INCORRECT), describe(cached)
    if cached.candidate is not None:
        assert cached.extra["timing_info"]["stopped"] == "alternated:3"
        assert cached.candidate.median_ms > 0.3 * honest.candidate.median_ms, (cached.candidate, honest.candidate)
