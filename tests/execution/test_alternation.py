"""Issue 3: with the ``kbench`` protocol, a job that measures its baselines times the candidate, eager
and torch.compile in interleaved blocks (``alternate_rounds``) and pools each one's samples; cached
baselines are not re-timed, and protocols without alternation time each once, one after the other."""

from __future__ import annotations

from typing import Any

from kernelbench_harness.core import Backend, Candidate, Outcome
from kernelbench_harness.execution.device import DeviceEvaluator, EvalJob
from kernelbench_harness.protocols import get_protocol

from .evalkit import AFFINE, STAND_IN_BASELINES, describe
from .test_outcomes import TRITON_OK

# alternation is off by default (see Protocol.alternate_rounds); these tests switch it on
ALT = get_protocol("kbench", warmup=1, trials=5, max_trials=12, time_budget_s=0.2, alternate_rounds=3)


def _job(protocol: Any, baselines: dict) -> EvalJob:
    cand = Candidate(AFFINE.level, AFFINE.problem_id, TRITON_OK, Backend.detect(TRITON_OK))
    return EvalJob(AFFINE, cand, protocol, run_seed=11, baselines=baselines, timeout_s=60, build_timeout_s=60)


def _windows(res) -> list[tuple[float, str]]:
    out = [(w["start"], "candidate") for w in res.extra["timing_windows"]]
    for mode, info in (res.extra.get("baseline_info") or {}).items():
        out += [(w["start"], mode) for w in (info or {}).get("windows", [])]
    return [what for _, what in sorted(out)]


def test_candidate_eager_and_compile_alternate_when_baselines_are_measured(evaluator: DeviceEvaluator) -> None:
    assert get_protocol("kbench").alternate_rounds == 1  # off unless asked for
    res = evaluator.evaluate(_job(ALT, {}))
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
    res = evaluator.evaluate(_job(ALT, dict(STAND_IN_BASELINES)))
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
        return evaluator.evaluate(EvalJob(AFFINE, cand, ALT, run_seed=seed, baselines={}, timeout_s=60,
                                          build_timeout_s=60))

    honest, cached = run(honest_src, 13), run(src, 14)  # own seeds: each measures (and alternates) baselines
    assert honest.candidate is not None, describe(honest)
    assert cached.outcome in (Outcome.CORRECT, Outcome.TIMING_INVALID, Outcome.INCORRECT), describe(cached)
    if cached.candidate is not None:
        assert cached.extra["timing_info"]["stopped"] == "alternated:3"
        # a replay costs about 0.4% of the interpreted kernel; 5% leaves room for the up to 2x that
        # load on a small machine moves the honest time between two evaluations
        assert cached.candidate.median_ms > 0.05 * honest.candidate.median_ms, (cached.candidate, honest.candidate)


def test_the_candidate_process_is_stopped_while_baselines_are_timed(tmp_path) -> None:
    """Review finding: with alternation, a native thread of the candidate could burn the CPU (or launch
    work) while the trusted side times eager and torch.compile, inflating them. ``_stopped`` SIGSTOPs
    the candidate's process group for that time: here a busy child makes no progress inside it."""
    import os
    import subprocess
    import sys
    import time
    from types import SimpleNamespace

    from kernelbench_harness.execution.device import _stopped

    counter = tmp_path / "n"
    # the count is published by rename, so a read never sees a half-written file
    code = ("import os, sys\nos.setsid()\nn = 0\nwhile True:\n    n += 1\n    if n % 20000 == 0:\n"
            "        open(sys.argv[1] + '.tmp', 'w').write(str(n))\n        os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(counter)])
    try:
        def value() -> int:
            try:
                return int(counter.read_text() or 0)
            except (OSError, ValueError):
                return 0

        deadline = time.time() + 20
        while value() == 0 and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # let it leave setsid behind: it leads its own process group
        with _stopped(SimpleNamespace(pid=p.pid), own_group=True):
            time.sleep(0.1)
            frozen = value()
            time.sleep(0.5)
            assert value() == frozen  # no progress while stopped
        deadline = time.time() + 10  # a loaded machine may take a while to schedule it again
        while value() <= frozen and time.time() < deadline:
            time.sleep(0.05)
        assert value() > frozen  # and it runs again afterwards
        assert os.getpgid(p.pid) == p.pid
    finally:
        p.kill()
        p.wait()


def test_windows_record_the_process_that_timed_and_its_cpu(evaluator: DeviceEvaluator) -> None:
    """A candidate's window names the candidate's process (``timer_pid``) and the CPU it ran on; a
    baseline's is timed by the slot itself (``pid``)."""
    res = evaluator.evaluate(_job(ALT, {}))
    assert res.outcome is Outcome.CORRECT, describe(res)
    for w in res.extra["timing_windows"]:
        assert w["timer_pid"] != w["pid"] and len(w["timer_cpu"]) == 2
    for info in (res.extra.get("baseline_info") or {}).values():
        for w in info["windows"]:
            assert "timer_pid" not in w and len(w["timer_cpu"]) == 2
