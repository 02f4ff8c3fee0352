"""KBENCH_LANE_PRIORITY (the lane's large job keeps the device while it computes): the paths review helper-64
found wrong, each a test that failed before its fix."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kernelbench_harness.execution.device import DeviceEvaluator
from kernelbench_harness.execution.scratch import HostDeviceLock

from .test_gpu_yield import _key, _wait_until


def _pair(tmp_path: Path, priority: bool, n: int = 2):
    key = _key()
    run_lock = threading.Lock()
    flags = [0] * n
    evs = [DeviceEvaluator("cpu", scratch_dir=tmp_path / f"s{i}", sandbox=False, timing_lock=run_lock,
                           window_queue=(flags, i)) for i in range(n)]
    for ev in evs:
        ev.host_lock_key = key
        ev.lane_priority = priority
    return key, flags, evs


def test_the_lane_bit_is_back_after_a_yield_that_ran_out_of_time(tmp_path: Path) -> None:
    """_gpu_yield's timed-out path takes the hold back directly, not through _take_shared: the rest of the lane job
    (its baselines, rechecks) must hold the device with its lane bit set again."""
    key, flags, evs = _pair(tmp_path, True, n=1)
    ev = evs[0]
    other_run = HostDeviceLock(key)  # another kbench run's window on the same GPU
    got = threading.Event()

    def window() -> None:
        other_run.acquire()
        got.set()
        time.sleep(0.8)
        other_run.release()

    try:
        with ev._gpu_work():
            ev._lane_job = True
            ev._set_lane(True)
            assert flags[0] & ev.LANE_BIT
            t = threading.Thread(target=window)
            t.start()
            assert _wait_until(lambda: ev._gpu_share.contended())
            from kernelbench_harness.execution.channel import ChannelTimeout
            with pytest.raises(ChannelTimeout):
                ev._gpu_yield(None, {}, deadline=time.monotonic() + 0.2)
            t.join(5)
            assert ev._gpu_share is not None  # the hold is back (the job goes on)
            assert flags[0] & ev.LANE_BIT, "the lane job holds the device again but its lane bit is gone"
            ev._set_lane(False)
            ev._lane_job = False
    finally:
        ev.close()


def test_lane_priority_is_on_unless_switched_off(monkeypatch):
    """On by default since H200 session 29 (two pairs of whole cached sweeps, both shorter with it); 0 turns it
    off."""
    from kernelbench_harness.execution.device import lane_priority_enabled

    monkeypatch.delenv("KBENCH_LANE_PRIORITY", raising=False)
    assert lane_priority_enabled() is True
    monkeypatch.setenv("KBENCH_LANE_PRIORITY", "0")
    assert lane_priority_enabled() is False


def test_a_bad_lane_priority_switch_is_refused_before_anything_is_stored(tmp_path, monkeypatch):
    """README: the on/off switches take 0/1 and any other value is refused before a run starts (each slot worker's
    DeviceEvaluator raised ValueError as it started, after the store was made)."""
    from click.testing import CliRunner

    from kernelbench_harness.cli import cli
    from kernelbench_harness.errors import ConfigError

    def _run(tmp_path, *args):  # as tests/pipeline/test_cli_inputs.py
        db = f"sqlite:///{tmp_path / 'k.db'}"
        return CliRunner().invoke(cli, ["run", "--db", db, "--display", "plain", "--no-report", *args]), db

    monkeypatch.setenv("KBENCH_LANE_PRIORITY", "maybe")
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1")
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError), repr(res.exception)
    assert not (tmp_path / "k.db").exists()


@pytest.mark.parametrize("priority", [False, True])
def test_a_window_cuts_into_the_lane_jobs_build_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           priority: bool) -> None:
    """As test_a_window_cuts_into_a_candidates_build_and_construction, with the candidate a large job (the lane)
    and the window another slot's of the same run (window_queue): with KBENCH_LANE_PRIORITY too the window goes on
    beside the lane job's 1.5 s build (host work), not after it."""

    from execution.evalkit import AFFINE, FAST_KBENCH, STAND_IN_BASELINES, describe
    from execution.test_reference_budget import CORRECT
    from kernelbench_harness.core import Backend, Candidate, Outcome
    from kernelbench_harness.execution.device import EvalJob

    slow = "import time as _t\n_t.sleep(1.5)\n" + CORRECT
    key, flags, evs = _pair(tmp_path, priority)
    seen: dict = {}
    orig = DeviceEvaluator._gpu_yield

    def other_slot() -> None:
        with evs[1]._gpu_work():
            t0 = time.time()
            with evs[1].timing_window("candidate") as w:
                seen["wait"] = w["start"] - t0
                time.sleep(0.1)

    def cut_in(self, h, phase=None, deadline=None, midstep=False):  # noqa: ANN001, ANN202
        if self is evs[0] and midstep and "thread" not in seen:
            seen["thread"] = threading.Thread(target=other_slot)
            seen["thread"].start()
        return orig(self, h, phase, deadline, midstep)

    monkeypatch.setattr(DeviceEvaluator, "_gpu_yield", cut_in)
    try:
        cand = Candidate(AFFINE.level, AFFINE.problem_id, slow, Backend.detect(slow))
        job = EvalJob(AFFINE, cand, FAST_KBENCH, run_seed=7, baselines=dict(STAND_IN_BASELINES), timeout_s=20.0,
                      build_timeout_s=60.0, large=True)
        res = evs[0].evaluate(job)
        seen["thread"].join(30)
        assert res.outcome is Outcome.CORRECT, describe(res)
        assert seen["wait"] < 0.5, f"the window waited {seen['wait']:.2f} s: for the lane job's build's 1.5 s sleep"
        assert flags == [0, 0]
    finally:
        for ev in evs:
            ev.close()


def _small_job(ev: DeviceEvaluator, steps: list[list[float]], n: int = 12, step_s: float = 0.05) -> None:
    """A small job's untimed device work: steps with a yield point between them (as _run_candidate has)."""
    with ev._gpu_work():
        if ev._lane_holds_device():  # as evaluate() begins a job
            ev._gpu_yield(None)
        for _ in range(n):
            t0 = time.time()
            time.sleep(step_s)
            steps.append([t0, time.time()])
            ev._gpu_yield(None)


@pytest.mark.parametrize("exclusive", [True, False])
def test_with_lane_exclusive_a_small_job_works_only_while_the_large_job_is_on_the_host(tmp_path: Path,
                                                                                     exclusive: bool) -> None:
    """KBENCH_LANE_EXCLUSIVE: another slot's untimed device work stops at its next step while the lane's large job
    computes, and goes on while the large job is on the host (here its host stretch) and after its end. Without
    the switch the two compute side by side, as before (session 31: large jobs twice as long beside small ones)."""
    from .test_gpu_yield import _lane_job

    key, flags, evs = _pair(tmp_path, True)
    for ev in evs:
        ev.lane_exclusive = exclusive
    lane: list[list[float]] = []
    host: list[list[float]] = []
    small: list[list[float]] = []
    try:
        t = threading.Thread(target=_lane_job, args=(evs[0], lane, host))
        t.start()
        assert _wait_until(lambda: len(lane) >= 1)
        _small_job(evs[1], small)
        t.join(20)
        assert not t.is_alive() and len(small) == 12 and len(lane) == 12
        overlaps = [(s, g) for s in small for g in lane if s[0] < g[1] - 0.01 and g[0] < s[1] - 0.01]
        if exclusive:
            # only the step the small job was in when the large job came back from the host (it stops at its next)
            assert len(overlaps) <= 1, overlaps
            # the small job's first steps ran beside the large job's host work, not after the large job's end
            assert small[1][0] < host[0][1], (small[:2], host)
        else:
            assert len(overlaps) >= 4, "without the switch the small job computes beside the large one"
        assert flags == [0, 0]
    finally:
        for ev in evs:
            ev.close()


def test_a_job_starts_its_device_work_after_the_lanes_and_records_the_wait(tmp_path: Path, monkeypatch) -> None:
    """A job that begins while another slot's lane job computes (lane_exclusive) waits before its own device work;
    the wait is in its phase_s (lane_start_wait). The lane's own job never waits for itself."""
    from kernelbench_harness.core import Outcome
    from kernelbench_harness.execution.device import EvalResult

    key, flags, evs = _pair(tmp_path, True)
    evs[1].lane_exclusive = True
    started: list[float] = []

    def fake_evaluate(job):  # noqa: ANN001
        started.append(time.time())
        return EvalResult(Outcome.CORRECT)

    monkeypatch.setattr(evs[1], "_evaluate", fake_evaluate)
    monkeypatch.setattr(evs[1], "_give_memory_back", lambda **k: None)
    released: list[float] = []

    def lane() -> None:
        with evs[0]._gpu_work():
            evs[0]._lane_job = True
            evs[0]._set_lane(True)
            time.sleep(0.6)
            released.append(time.time())
            evs[0]._set_lane(False)
            evs[0]._lane_job = False

    class Job:
        large = False

    try:
        t = threading.Thread(target=lane)
        t.start()
        assert _wait_until(lambda: flags[0] & DeviceEvaluator.LANE_BIT)
        res = evs[1].evaluate(Job())
        t.join(5)
        assert started and released and started[0] >= released[0] - 0.01
        assert 0.3 < res.phase_s["lane_start_wait"] < 5
        assert flags == [0, 0]
    finally:
        for ev in evs:
            ev.close()


def test_lane_exclusive_is_off_unless_switched_on_and_a_bad_value_is_refused(monkeypatch):
    from kernelbench_harness.execution.device import lane_exclusive_enabled

    monkeypatch.delenv("KBENCH_LANE_EXCLUSIVE", raising=False)
    assert lane_exclusive_enabled() is False
    monkeypatch.setenv("KBENCH_LANE_EXCLUSIVE", "1")
    assert lane_exclusive_enabled() is True
    monkeypatch.setenv("KBENCH_LANE_EXCLUSIVE", "sometimes")
    with pytest.raises(ValueError):
        lane_exclusive_enabled()
