"""KBENCH_LANE_EXCLUSIVE (other slots' untimed device work waits while the lane's large job computes): the paths
review found wrong, each a test that failed before its fix."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from kernelbench_harness.execution.device import DeviceEvaluator
from kernelbench_harness.execution.scratch import HostDeviceLock

from .test_gpu_yield import _key, _wait_until


def test_a_slot_waiting_for_the_lane_does_not_take_the_hold_back_ahead_of_the_lanes_window(tmp_path: Path) -> None:
    """_take_shared waited for queued windows first and for the lane after, then took the hold: the lane's job
    going to its own timing window queues it and then drops its lane bit, so a slot waiting for the lane took
    its shared hold back right then, and the lane job's window waited for that slot's next step."""
    flags = [0, 0]
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "s0", sandbox=False, timing_lock=threading.Lock(),
                         window_queue=(flags, 0))
    ev.lane_priority = ev.lane_exclusive = True
    key = _key()
    lk = HostDeviceLock(key)
    flags[1] = ev.LANE_BIT  # slot 1's large job computes
    got = threading.Event()

    def retake() -> None:
        ev._take_shared(lk)
        got.set()

    t = threading.Thread(target=retake)
    try:
        t.start()
        time.sleep(0.2)
        assert not got.is_set()  # waits for the lane
        flags[1] = ev.QUEUED_BIT | ev.LANE_BIT  # the lane job goes to its window: queued first ...
        flags[1] = ev.QUEUED_BIT  # ... then its lane bit drops as it gives its hold up
        time.sleep(0.3)
        assert not got.is_set(), "the hold was taken back while the lane job's window was queued"
        flags[1] = 0  # its window is over
        assert _wait_until(got.is_set, 5)
    finally:
        flags[1] = 0
        t.join(5)
        if got.is_set():
            lk.release()
        ev.close()


def test_a_wait_for_the_lane_does_not_run_the_candidates_time_out(tmp_path: Path) -> None:
    """Between steps, _take_shared cut its wait for another slot's lane job at the candidate's deadline and then
    tried the lock once: a candidate with 0.1 s left took its hold back while the lane's job still computed (and,
    had a window held the lock at that instant, was ended as a timeout). The lane wait is the harness's, not the
    candidate's: it now moves the deadline by its length."""
    flags = [0, 0]
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "s0", sandbox=False, timing_lock=threading.Lock(),
                         window_queue=(flags, 0))
    ev.lane_priority = ev.lane_exclusive = True
    lk = HostDeviceLock(_key())
    flags[1] = ev.LANE_BIT  # slot 1's large job computes for 0.5 s
    timer = threading.Timer(0.5, lambda: flags.__setitem__(1, 0))
    timer.start()
    try:
        t0 = time.monotonic()
        ev._take_shared(lk, deadline=t0 + 0.1)
        assert time.monotonic() - t0 >= 0.45  # it waited for the lane (before the fix: 0.1 s)
        lk.release()
    finally:
        timer.cancel()
        flags[1] = 0
        ev.close()


def test_a_window_queued_past_the_deadline_still_times_the_candidate_out(tmp_path: Path) -> None:
    """Only the lane wait moves the deadline: a wait for another slot's queued timing window still ends at it."""
    import pytest

    flags = [0, 0]
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "s0", sandbox=False, timing_lock=threading.Lock(),
                         window_queue=(flags, 0))
    ev.lane_priority = ev.lane_exclusive = True
    key = _key()
    lk = HostDeviceLock(key)
    other = HostDeviceLock(key)
    other.acquire()  # slot 1 holds its window (exclusively)
    flags[1] = ev.QUEUED_BIT
    try:
        with pytest.raises(TimeoutError):
            ev._take_shared(lk, deadline=time.monotonic() + 0.2)
    finally:
        flags[1] = 0
        other.release()
        ev.close()
