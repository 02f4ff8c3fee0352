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
