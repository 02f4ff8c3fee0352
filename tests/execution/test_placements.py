"""Issue 3: timing in several placements (``Protocol.placements``): the inputs move to new memory
between segments, the reported median is the mean of the segments' medians and its interval covers
their spread. Every protocol uses one placement (on an H200 the placements of one run agreed; the
run-to-run levels were launch latency), so these tests ask for placements explicitly."""

from __future__ import annotations

import statistics
from typing import Any

import pytest
import torch

from kernelbench_harness.core import Backend, Candidate, Outcome
from kernelbench_harness.errors import ConfigError
from kernelbench_harness.execution import timing as T
from kernelbench_harness.execution.device import DeviceEvaluator, EvalJob, pool_blocks
from kernelbench_harness.protocols import Protocol, get_protocol

from .evalkit import AFFINE, describe
from .test_outcomes import TRITON_OK

CPU = torch.device("cpu")
FIXED = T.TimerSettings(timer="wall", warmup=2, trials=8, adaptive=False, placements=4)


def _sets() -> list[list[Any]]:
    g = torch.Generator().manual_seed(0)
    return [[torch.randn(64, 32, generator=g), 3, torch.arange(5)] for _ in range(3)]


def test_placer_moves_every_tensor_and_keeps_values_and_other_arguments() -> None:
    sets = _sets()
    before = [[x.clone() if isinstance(x, torch.Tensor) else x for x in s] for s in sets]
    ptrs = {x.data_ptr() for s in sets for x in s if isinstance(x, torch.Tensor)}
    outer = sets
    placer = T.Placer(sets, CPU)
    placer(1)
    assert sets is outer and placer.moved == 1 and placer.skipped == 0
    for s, b in zip(sets, before):
        assert s[1] == 3
        for x, y in zip(s, b):
            if isinstance(x, torch.Tensor):
                assert torch.equal(x, y) and x.dtype == y.dtype and x.stride() == y.stride()
                assert x.data_ptr() not in ptrs  # new memory, not an old tensor's block
    assert placer.spacer is not None and placer.spacer.numel() == 8 * (1 << 20) + 4096  # (7 mod 61) + 1 MiB
    placer(2)
    assert placer.spacer.numel() == 15 * (1 << 20) + 2 * 4096  # another size and alignment each time
    assert len(placer.retired) == 3  # the first placement's sets, its spacer, the second's sets
    placer.release()
    assert placer.spacer is None and not placer.retired


def test_placer_keeps_the_sets_where_they_are_when_the_device_lacks_memory_for_a_second_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sets = _sets()
    ptrs = [x.data_ptr() for s in sets for x in s if isinstance(x, torch.Tensor)]
    placer = T.Placer(sets, CPU)
    placer.device = torch.device("cuda", 0)  # as on a GPU: free memory is asked first
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (100 << 20, 80 << 30))
    placer(1)
    assert placer.skipped == 1 and placer.moved == 0 and placer.spacer is None
    assert [x.data_ptr() for s in sets for x in s if isinstance(x, torch.Tensor)] == ptrs


def test_time_callable_times_each_placement_after_moving_the_inputs_and_numbers_trials_on() -> None:
    sets = _sets()
    placer = T.Placer(sets, CPU)
    log: list[tuple[str, int, int]] = []  # (what, index, data_ptr of the set's first tensor)
    state = {"timed": False}

    def between() -> None:
        state["timed"] = True

    def fn(i: int) -> None:
        log.append(("timed" if state["timed"] else "warmup", i, sets[i % 3][0].data_ptr()))
        state["timed"] = False

    settings = T.TimerSettings(timer="wall", warmup=2, trials=32, adaptive=False, placements=4)
    stats, info = T.time_callable(fn, CPU, settings, between=between, relocate=placer)
    assert placer.moved == 3
    assert info["placements"] == 4 and info["stopped"] == "placements:4"
    # a fixed trial count is shared out, not multiplied
    assert info["placement_n"] == [8, 8, 8, 8] and stats.n == 32 and len(stats.samples_ms) == 32
    timed = [i for what, i, _ in log if what == "timed"]
    assert timed == list(range(32))  # numbered on across placements: input rotation and refreshes stay in step
    # every placement's trials ran on its own memory, and each placement warmed up again before timing
    by_placement = [{p for what, i, p in log if what == "timed" and 8 * k <= i < 8 * (k + 1)} for k in range(4)]
    for a in range(4):
        for b in range(a + 1, 4):
            assert not by_placement[a] & by_placement[b]
    assert info["warmup_calls"] == 4 * settings.warmup
    meds = [statistics.median(stats.samples_ms[8 * k:8 * (k + 1)]) for k in range(4)]
    assert stats.median_ms == pytest.approx(statistics.fmean(meds))
    assert info["placement_medians_ms"] == pytest.approx(meds, abs=1e-6)  # stored to the nanosecond


def test_one_placement_keeps_no_output_alive_into_the_next_call() -> None:
    """As before placements existed: a baseline's output is freed before its next call (a held one
    would double a multi-GB output's memory and alternate it between two blocks)."""
    import weakref

    alive: list[int] = []
    refs: list[weakref.ref] = []

    def fn(i: int) -> torch.Tensor:
        alive.append(sum(r() is not None for r in refs))
        out = torch.ones(4)
        refs.append(weakref.ref(out))
        return out

    T.time_callable(fn, CPU, T.TimerSettings(timer="wall", warmup=2, trials=6, adaptive=False))
    assert alive == [0] * 8


def test_a_placement_that_cannot_get_memory_stays_put(monkeypatch: pytest.MonkeyPatch) -> None:
    sets = _sets()
    ptrs = [x.data_ptr() for s in sets for x in s if isinstance(x, torch.Tensor)]
    placer = T.Placer(sets, CPU)

    def no_memory(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(T, "_clone", no_memory)
    assert placer(1) is False and placer.skipped == 1 and placer.moved == 0 and placer.spacer is None
    assert [x.data_ptr() for s in sets for x in s if isinstance(x, torch.Tensor)] == ptrs


def test_the_placement_interval_never_uses_a_smaller_t_than_the_exact_one() -> None:
    exact = {1: 12.706, 3: 3.182, 11: 2.201, 13: 2.160, 25: 2.060, 40: 2.021, 1000: 1.962}
    for df, t in exact.items():
        assert T._t95(df) >= t - 1e-9, df
    assert T._t95(11) == 2.228 and T._t95(40) == 2.042


def test_the_profiler_timer_refuses_placements_and_launch_hiding() -> None:
    for bad in ({"placements": 2}, {"hide_launch": True}):
        with pytest.raises(ConfigError, match="profiler"):
            get_protocol("cuda-agent", **bad)
    get_protocol("kernelbench", placements=2)  # CUDA events: allowed


def test_without_relocate_or_with_one_placement_timing_is_one_segment() -> None:
    calls: list[int] = []
    stats, info = T.time_callable(calls.append, CPU, FIXED)  # placements asked, nothing to move
    assert "placements" not in info and stats.n == FIXED.trials
    stats, info = T.time_callable(calls.append, CPU, T.TimerSettings(timer="wall", warmup=1, trials=5),
                                  relocate=T.Placer(_sets(), CPU))
    assert "placements" not in info and stats.n == 5


def test_adaptive_settings_are_shared_out_over_the_placements() -> None:
    s = T.TimerSettings(adaptive=True, trials=20, max_trials=2000, time_budget_s=4.0, min_time_s=0.25,
                        warmup_ms=100.0, placements=4)
    part = T.segment_settings(s, 4)
    assert (part.trials, part.max_trials, part.placements) == (5, 500, 1)
    assert part.time_budget_s == pytest.approx(1.0) and part.min_time_s == pytest.approx(0.0625)
    assert part.warmup_ms == 100.0  # the first placement warms an idle GPU up fully


def test_the_median_is_the_mean_over_placements_and_its_interval_covers_their_spread() -> None:
    s = T.TimerSettings(placements=4)
    two_levels = [[1.0, 1.001, 0.999] * 10, [1.0, 1.001, 0.999] * 10, [1.3, 1.301, 1.299] * 10,
                  [1.3, 1.301, 1.299] * 10]
    st = T.pool_placement_samples(two_levels, s, "cuda_events")
    assert st.median_ms == pytest.approx(1.15)
    assert st.ci95_low_ms < 1.0 and st.ci95_high_ms > 1.3  # t(3) x se = 3.18 x 0.087: both levels inside
    assert st.n == 120 and st.min_ms == pytest.approx(0.999) and st.max_ms == pytest.approx(1.301)
    one_level = [[1.0, 1.001, 0.999] * 10] * 4
    st1 = T.pool_placement_samples(one_level, s, "cuda_events")
    assert st1.median_ms == pytest.approx(1.0) and st1.ci_rel_halfwidth < 0.002
    # one placement in four on the slow level moves the result by a quarter of the gap; a median of the
    # pooled samples would not move at all, and would jump the whole gap at two in four
    three_one = [[1.0, 1.001, 0.999] * 10] * 3 + [[1.3, 1.301, 1.299] * 10]
    assert T.pool_placement_samples(three_one, s, "cuda_events").median_ms == pytest.approx(1.075)
    assert statistics.median([x for p in three_one for x in p]) == pytest.approx(1.0, abs=0.002)


def test_alternated_blocks_pool_their_placements_alike() -> None:
    s = T.TimerSettings(placements=2)
    mk = lambda vals: T.summarize_samples(vals, timer="wall", statistic="median")  # noqa: E731
    blocks = [(mk([1.0] * 5 + [1.2] * 5), {"placement_n": [5, 5], "elapsed_s": 0.1}),
              (mk([1.0] * 5 + [1.0] * 5), {"placement_n": [5, 5], "elapsed_s": 0.1})]
    stats, info = pool_blocks(blocks, s)
    assert stats.median_ms == pytest.approx((1.0 + 1.2 + 1.0 + 1.0) / 4) and stats.n == 20
    assert info["stopped"] == "alternated:2"


def test_alternated_blocks_keep_their_host_pacing_counts() -> None:
    """Pooled blocks (``alternate_rounds``) sum each block's counts, so an alternated timing that the host paced in
    most trials is still flagged host-bound (they were dropped: no alternated timing could be flagged)."""
    from kernelbench_harness.execution.device import host_bound_callables

    s = T.TimerSettings()
    mk = lambda vals: T.summarize_samples(vals, timer="cuda_events", statistic="median")  # noqa: E731
    hidden = [(mk([1.0] * 4), {"launch_hidden_trials": 4, "launch_host_bound": 3, "launch_exposed": 1}),
              (mk([1.0] * 4), {"launch_hidden_trials": 4, "launch_host_bound": 2, "launch_exposed": 0})]
    _, info = pool_blocks(hidden, s)
    assert (info["launch_hidden_trials"], info["launch_host_bound"], info["launch_exposed"]) == (8, 5, 1)
    unhidden = [(mk([1.0] * 4), {"launch_unhidden_trials": 4, "launch_unhidden_host_bound": 4,
                                 "launch_host_share": 0.99}),
                (mk([1.0] * 4), {"launch_unhidden_trials": 4, "launch_unhidden_host_bound": 1,
                                 "launch_host_share": 0.5}),
                (mk([1.0] * 4), {"launch_unhidden_trials": 4, "launch_unhidden_host_bound": 2,
                                 "launch_host_share": 0.9})]
    _, info = pool_blocks(unhidden, s)
    assert (info["launch_unhidden_trials"], info["launch_unhidden_host_bound"]) == (12, 7)
    assert info["launch_host_share"] == 0.9
    assert host_bound_callables(info, {}) == ["candidate"]
    assert "launch_hidden_trials" not in info  # no block recorded it


def test_protocols_placements_and_stored_protocols_without_the_field() -> None:
    for name in ("kbench", "kernelbench", "cuda-agent"):
        assert get_protocol(name).placements == 1
    d = get_protocol("kbench").to_dict()
    d.pop("placements")
    old = Protocol.from_dict(d)
    assert old.placements == 1  # what a store written before the field did
    assert old.fingerprint() == get_protocol("kbench").fingerprint()  # its baselines are still reused
    four = get_protocol("kbench", placements=4)
    assert four.timing_fingerprint() != old.timing_fingerprint()  # baselines in 4 placements are kept apart
    with pytest.raises(ConfigError, match="placements"):
        get_protocol("kbench", placements=0)
    with pytest.raises(ConfigError, match="placements"):
        get_protocol("kbench", placements="4")
    assert T.TimerSettings.from_protocol(four, CPU).placements == 4


def test_candidate_and_baselines_are_timed_in_placements(evaluator: DeviceEvaluator) -> None:
    proto = get_protocol("kbench", warmup=1, trials=8, max_trials=40, time_budget_s=0.4, placements=4)
    cand = Candidate(AFFINE.level, AFFINE.problem_id, TRITON_OK, Backend.detect(TRITON_OK))
    res = evaluator.evaluate(EvalJob(AFFINE, cand, proto, run_seed=5, baselines={}, timeout_s=60,
                                     build_timeout_s=60))
    assert res.outcome is Outcome.CORRECT, describe(res)
    info = res.extra["timing_info"]
    assert info["placements"] == 4 and info["placements_moved"] == 3 and info["placements_skipped"] == 0
    n = info["placement_n"]
    assert len(n) == 4 and sum(n) == res.candidate.n
    at, meds = 0, []
    for c in n:
        meds.append(statistics.median(res.candidate.samples_ms[at:at + c]))
        at += c
    assert res.candidate.median_ms == pytest.approx(statistics.fmean(meds))
    for mode in ("eager", "compile:default"):
        binfo = res.extra["baseline_info"][mode]
        assert binfo["placements"] == 4 and len(binfo["placement_medians_ms"]) == 4, binfo


def test_launch_hiding_is_on_in_kbench_only_and_never_on_a_cpu() -> None:
    assert get_protocol("kbench").hide_launch is True
    for name in ("kernelbench", "cuda-agent"):  # their procedures time the launch
        assert get_protocol(name).hide_launch is False
    d = get_protocol("kernelbench").to_dict()
    d.pop("hide_launch")
    assert Protocol.from_dict(d).fingerprint() == get_protocol("kernelbench").fingerprint()
    # a kbench protocol stored before the setting existed timed without it: read back as off, apart
    old = get_protocol("kbench").to_dict()
    old.pop("hide_launch")
    assert Protocol.from_dict(old).hide_launch is False
    assert Protocol.from_dict(old).timing_fingerprint() != get_protocol("kbench").timing_fingerprint()
    off = get_protocol("kbench", hide_launch=False)
    assert off.timing_fingerprint() != get_protocol("kbench").timing_fingerprint()  # its baselines kept apart
    assert T.TimerSettings.from_protocol(get_protocol("kbench"), CPU).hide_launch is False


def test_a_candidate_seen_on_several_streams_or_unprofiled_is_timed_without_launch_hiding() -> None:
    from kernelbench_harness.execution.device import launch_hiding_for

    on = T.TimerSettings(timer="cuda_events", hide_launch=True)
    assert launch_hiding_for(on, {"kernels": {"k": 1}, "streams": [7]}) == (on, "on")
    kept, note = launch_hiding_for(on, {"kernels": {"k": 1}, "streams": [7]}, 1.9e6)
    assert note == "on" and kept.spin_cycles_per_ms == 1.9e6  # the trusted side's measurement goes along
    for profile in ({"kernels": {"k": 1}, "streams": [7, 9]}, {"error": "profiler unavailable"}, {}):
        settings, note = launch_hiding_for(on, profile)
        assert settings.hide_launch is False and note.startswith("off"), profile
        assert settings.timer == "cuda_events"  # nothing else changes
    off = T.TimerSettings(timer="cuda_events")
    assert launch_hiding_for(off, {"streams": [1, 2]}) == (off, None)


class _FakeEvent:
    """A CUDA event stand-in: every start/end pair spans ``GPU_MS`` of 'device' time; a pre/start pair
    (the spin) spans ``SPIN_MS``."""

    GPU_MS = 0.5
    SPIN_MS = 0.2

    made = 0

    def __init__(self, enable_timing: bool = True) -> None:
        _FakeEvent.made += 1
        self.order = _FakeEvent.made  # creation order: the loop makes start, end, then the spin's pre


def _fake_timing(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    spins: list[int] = []

    def record(ev: _FakeEvent) -> None:
        pass

    def elapsed(a: _FakeEvent, b: _FakeEvent) -> float:
        return _FakeEvent.SPIN_MS if b.order < a.order else _FakeEvent.GPU_MS  # (pre, start): the spin

    monkeypatch.setattr(T, "_Event", _FakeEvent)
    monkeypatch.setattr(T, "_record", record)
    monkeypatch.setattr(T, "_elapsed_time", elapsed)
    monkeypatch.setattr(T, "_synchronize", lambda device=None: None)
    monkeypatch.setattr(T, "_sleep", lambda cycles: spins.append(int(cycles)))
    return spins


@pytest.mark.parametrize("host_ms", [0.0, 3.0])
def test_a_hidden_trial_is_the_larger_of_the_device_time_and_the_host_time_to_issue_the_call(
        monkeypatch: pytest.MonkeyPatch, host_ms: float) -> None:
    """With launch hiding a call whose host side is short is timed by its device time (launch latency
    gone); a call whose host side is long (work on the CPU, or a launch-bound call) by its host time,
    so the spin never hides host work."""
    spins = _fake_timing(monkeypatch)
    # a device time far from the host time either way, so a slow CI machine cannot blur the two cases
    monkeypatch.setattr(_FakeEvent, "GPU_MS", 0.5 if host_ms else 200.0)
    settings = T.TimerSettings(timer="cuda_events", warmup=3, trials=6, adaptive=False, hide_launch=True,
                               spin_max_ms=10.0)
    # the host's clock, advanced 1 us a read and by the call's host work: a real sleep on a loaded machine
    # overslept past the spin (3x the calibrated host time) now and then, and the launch counted as exposed
    clock = [0]

    def now_ns() -> int:
        clock[0] += 1_000
        return clock[0]

    monkeypatch.setattr(T, "_perf_counter_ns", now_ns)

    def fn(i: int) -> None:
        clock[0] += int(host_ms * 1e6)

    stats, info = T.time_callable(fn, torch.device("cuda", 0), settings)
    assert stats.n == 6 and info["launch_hidden_trials"] == 6
    if host_ms:
        assert min(stats.samples_ms) >= host_ms and info["launch_host_bound"] == 6
        assert info["launch_exposed"] == 0  # the spin, 3x the host time, still covered the launch
        assert info["launch_sleep_ms"] == pytest.approx(min(10.0, 3 * info["launch_host_ms"]), rel=1e-3)
    else:
        assert stats.samples_ms == (_FakeEvent.GPU_MS,) * 6 and info["launch_host_bound"] == 0
        assert info["launch_sleep_ms"] == pytest.approx(max(0.05, 3 * info["launch_host_ms"]), rel=1e-3, abs=1e-4)
    # one calibration spin of 1M cycles, then one spin per timed trial sized from the calibration
    assert spins[0] == 1_000_000 and len(spins) == 7
    per_ms = 1_000_000 / _FakeEvent.GPU_MS
    assert spins[1] == pytest.approx(max(1000, per_ms * info["launch_sleep_ms"]), rel=1e-4)  # info rounds
    # synced: host time after the spin until idle, never negative
    assert all(x >= 0 for x in info["synced_ms"]) and len(info["synced_ms"]) == 6


def test_without_hiding_the_event_time_is_the_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    spins = _fake_timing(monkeypatch)
    monkeypatch.setattr(_FakeEvent, "GPU_MS", 200.0)  # far above any host time to issue a call that does nothing
    settings = T.TimerSettings(timer="cuda_events", warmup=2, trials=4, adaptive=False)
    stats, info = T.time_callable(lambda i: None, torch.device("cuda", 0), settings)
    assert stats.samples_ms == (_FakeEvent.GPU_MS,) * 4 and not spins and "launch_hidden_trials" not in info
    assert info["launch_unhidden_trials"] == 4 and info["launch_unhidden_host_bound"] == 0
    assert info["launch_host_share"] < 0.05


@pytest.mark.parametrize("placements", [1, 2])
def test_without_hiding_a_trial_the_host_issued_for_most_of_its_event_time_counts_as_host_paced(
        monkeypatch: pytest.MonkeyPatch, placements: int) -> None:
    """Unhidden, the start event fires when recorded, so a host-paced call's event time is its issue time plus
    the last kernel (H200 session 29: L3/29's candidate, timed without hiding for its nine streams, took 6.69 and
    15.22 ms in two processes and was never flagged). A call whose issue takes 30 ms of a 31 ms event time is
    host-paced in every trial; with a 200 ms event time, in none. Placements count across segments."""
    import time

    _fake_timing(monkeypatch)
    settings = T.TimerSettings(timer="cuda_events", warmup=1, trials=4, adaptive=False, placements=placements)

    def fn(i: int) -> None:
        time.sleep(0.03)

    relocate = (lambda p: True) if placements > 1 else None
    for gpu_ms, paced in ((31.0, 4), (200.0, 0)):
        monkeypatch.setattr(_FakeEvent, "GPU_MS", gpu_ms)
        stats, info = T.time_callable(fn, torch.device("cuda", 0), settings, relocate=relocate)
        assert info["launch_unhidden_trials"] == 4 and info["launch_unhidden_host_bound"] == paced, gpu_ms
        assert (info["launch_host_share"] >= T.HOST_PACED_SHARE) == bool(paced)


def test_an_unhidden_trial_with_no_device_time_is_host_paced_and_its_share_stays_finite() -> None:
    """An event time of 0 (nothing on the device) leaves the call's time to the host; its share is kept out of the
    median, which the store writes as JSON (an infinite share came out as the non-JSON ``Infinity``)."""
    import json

    paced = T._HostPacing()
    paced.count(0.01, 0.0)
    paced.count(0.01, 0.0)
    paced.count(0.01, 1.0)
    info = paced.info()
    assert (info["launch_unhidden_trials"], info["launch_unhidden_host_bound"]) == (3, 2)
    assert info["launch_host_share"] == 0.01 and "Infinity" not in json.dumps(info)
    only_zero = T._HostPacing()
    only_zero.count(0.01, 0.0)
    assert only_zero.info()["launch_host_share"] is None


def test_without_hiding_the_wait_for_the_device_is_not_host_issue_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue time ends once the end event is recorded, before the synchronise: a GPU-bound call, whose host
    then waits for the device about as long as the event time, is not host-paced (its synced time would be)."""
    import time

    _fake_timing(monkeypatch)
    monkeypatch.setattr(_FakeEvent, "GPU_MS", 31.0)
    monkeypatch.setattr(T, "_synchronize", lambda device=None: time.sleep(0.03))  # the device busy ~30 ms
    settings = T.TimerSettings(timer="cuda_events", warmup=0, trials=3, adaptive=False)
    _, info = T.time_callable(lambda i: None, torch.device("cuda", 0), settings)
    assert min(info["synced_ms"]) >= 30.0
    assert info["launch_unhidden_trials"] == 3 and info["launch_unhidden_host_bound"] == 0
    assert info["launch_host_share"] < 0.5


@pytest.mark.parametrize("hide", [False, True])
@pytest.mark.parametrize("placements", [1, 2])
def test_the_trial_discard_first_drops_is_in_no_host_pacing_count(
        monkeypatch: pytest.MonkeyPatch, hide: bool, placements: int) -> None:
    """``discard_first`` (the ``kernelbench`` protocol, timed without hiding) drops each segment's first trial
    from the stats, so it is in neither count: they counted it, and a cold first trial the host paced, beside one
    of the two kept trials, flagged the callable host-bound (2 of 3) though only half its kept trials were."""
    import time

    from kernelbench_harness.execution.device import host_bound_callables

    _fake_timing(monkeypatch)
    monkeypatch.setattr(_FakeEvent, "GPU_MS", 31.0 if not hide else 0.5)
    settings = T.TimerSettings(timer="cuda_events", warmup=0, trials=2 * placements, adaptive=False,
                               discard_first=True, placements=placements, hide_launch=hide, spin_max_ms=10.0)
    calls = [0]

    def fn(i: int) -> None:  # each segment: its first (dropped) trial and its first kept one host-paced
        k, calls[0] = calls[0], calls[0] + 1
        if k % 3 in (0, 1):
            time.sleep(0.03)

    relocate = (lambda p: True) if placements > 1 else None
    stats, info = T.time_callable(fn, torch.device("cuda", 0), settings, relocate=relocate)
    assert stats.n == 2 * placements and calls[0] == 3 * placements
    trials, bound = (("launch_hidden_trials", "launch_host_bound") if hide else
                     ("launch_unhidden_trials", "launch_unhidden_host_bound"))
    assert (info[trials], info[bound]) == (2 * placements, placements)
    assert host_bound_callables(info, {}) == []


def test_a_candidate_spin_uses_the_trusted_rate_and_the_protocol_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the trusted side's cycles per ms, the timer does not measure the spin itself (a candidate
    loading the GPU meanwhile would stretch it), and slow host calls cannot make it longer than
    ``spin_max_ms``: they are timed by their host time instead."""
    import time

    spins = _fake_timing(monkeypatch)
    settings = T.TimerSettings(timer="cuda_events", warmup=3, trials=4, adaptive=False, hide_launch=True,
                               spin_max_ms=0.5, spin_cycles_per_ms=2.0e6)
    stats, info = T.time_callable(lambda i: time.sleep(0.003), torch.device("cuda", 0), settings)
    assert spins == [int(2.0e6 * 0.5)] * 4  # no 1M-cycle calibration spin of its own
    assert info["launch_sleep_ms"] == 0.5 and info["launch_exposed"] == 4 and min(stats.samples_ms) >= 3.0
    assert get_protocol("kbench").hide_launch_max_ms == 0.5
    assert T.TimerSettings.from_protocol(get_protocol("kbench", hide_launch_max_ms=2.0), CPU).spin_max_ms == 2.0


@pytest.mark.parametrize("placements,discard_first,round_sig", [(1, False, 0), (1, True, 3), (4, True, 3), (4, False, 0)])
def test_the_trusted_sides_summary_of_the_raw_samples_is_what_an_honest_block_reports(
        placements: int, discard_first: bool, round_sig: int) -> None:
    """The trusted side now derives a block's median, mean, min and max from its raw samples itself
    (stats_from_samples) and flags a report that differs (stats_forged): an honest block, single or over
    placements, discarding its first trial or not, rounded or not, must agree exactly, or every candidate
    would be called a cheat."""
    sets = _sets()
    placer = T.Placer(sets, CPU) if placements > 1 else None
    settings = T.TimerSettings(timer="wall", warmup=2, trials=24, adaptive=False, placements=placements,
                               discard_first=discard_first, round_sig=round_sig)

    def fn(i: int) -> torch.Tensor:
        return sets[i % 3][0] * 2.0

    stats, info = T.time_callable(fn, CPU, settings, relocate=placer)
    if placer is not None:
        assert len(info["placement_n"]) == 4
    derived = T.stats_from_samples(stats, info, settings)
    assert T.stats_forged(stats, derived) == []
    assert (derived.median_ms, derived.mean_ms, derived.n) == (stats.median_ms, stats.mean_ms, stats.n)


def test_a_summary_its_samples_do_not_give_is_named_and_replaced() -> None:
    """A candidate's process that shrinks its reported median (statistics.median replaced, or the message
    rewritten) is found out by the trusted side's own summary, which is what gets used."""
    import dataclasses

    settings = T.TimerSettings(timer="wall", warmup=1, trials=9, adaptive=False, round_sig=3)
    stats, info = T.time_callable(lambda i: torch.ones(8) * i, CPU, settings)
    forged = dataclasses.replace(stats, median_ms=stats.median_ms / 1000.0, mean_ms=stats.mean_ms / 1000.0)
    derived = T.stats_from_samples(forged, info, settings)
    assert T.stats_forged(forged, derived) == ["median_ms", "mean_ms"]
    assert derived.median_ms == stats.median_ms and derived.mean_ms == stats.mean_ms
    # the profiler timer reports one per-iteration figure, not trials: nothing to derive
    prof = dataclasses.replace(stats, timer="profiler", samples_ms=(0.5,), median_ms=0.5, mean_ms=0.5)
    assert T.stats_from_samples(prof, {}, settings) is prof
