"""Two kbench runs on one host never time on the same physical device at once (host-wide lock).

On the H200 pair (2026-12-01) two runs that both ended up on GPU 0 timed at the same moments, and long
kernels measured twice their time. Each run's own timing lock could not see the other run.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from kernelbench_harness.execution.device import DeviceEvaluator
from kernelbench_harness.execution.scratch import HostDeviceLock

HOLDER = r"""
import sys, time
from pathlib import Path
from kernelbench_harness.execution.scratch import HostDeviceLock
lk = HostDeviceLock(sys.argv[1], Path(sys.argv[2]))
lk.acquire()
print("held", time.time(), flush=True)
time.sleep(float(sys.argv[3]))
print("released", time.time(), flush=True)
lk.release()
"""


def test_windows_of_two_evaluators_on_one_device_do_not_overlap(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # lock files under tmp_path (tempfile reads it anew)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    evs = [DeviceEvaluator("cpu", scratch_dir=tmp_path / "s", sandbox=False) for _ in range(2)]
    try:
        for ev in evs:
            ev.host_lock_key = "gpu-GPU-1234/abc"  # as a CUDA evaluator sets it from the device's UUID
        windows: list[dict] = []

        def hold(ev: DeviceEvaluator) -> None:
            with ev.timing_window("candidate") as w:
                time.sleep(0.5)
            windows.append(w)

        threads = [threading.Thread(target=hold, args=(ev,)) for ev in evs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(windows) == 2
        a, b = sorted(windows, key=lambda w: w["start"])
        assert b["start"] >= a["end"]  # the second waited for the first
        assert b["host_lock_wait_s"] >= 0.3
        assert (tmp_path / "kbench-locks" / "gpu-GPU-1234_abc.lock").exists()
    finally:
        for ev in evs:
            ev.close()


def test_lock_is_host_wide_and_freed_when_its_holder_dies(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", HOLDER, "gpu-x", str(tmp_path), "1.0"], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().startswith("held")
    lk = HostDeviceLock("gpu-x", tmp_path)
    waited = lk.acquire()
    released = float(p.stdout.readline().split()[1])
    assert time.time() >= released and waited >= 0.5
    lk.release()
    p.wait(timeout=30)
    # a holder killed while holding: the kernel drops its flock, nobody waits forever
    q = subprocess.Popen([sys.executable, "-c", HOLDER, "gpu-x", str(tmp_path), "600"], stdout=subprocess.PIPE,
                         text=True)
    assert q.stdout.readline().startswith("held")
    q.kill()
    q.wait(timeout=30)
    assert lk.acquire() < 5.0
    lk.release()
    lk.release()  # a second release is a no-op


def test_cpu_evaluator_takes_no_host_lock(tmp_path):
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path, sandbox=False)
    try:
        assert ev.host_lock_key is None
        with ev.timing_window("candidate") as w:
            pass
        assert "host_lock_wait_s" not in w
    finally:
        ev.close()
