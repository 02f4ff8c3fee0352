"""A quiet host while a slot times (``--quiet-host``, :mod:`kernelbench_harness.execution.quiet`): the
run's builds and warm-ups pause, the device slots (and the candidates they time) do not, and nothing
stays paused.

Session 9 on an H200: timings the host paces slowed by 20-70% while 12 processes kept other cores busy.

Each test starts a stand-in runner (in a session of its own) with two children: a "build" with a child
of its own (nvcc under a build worker) and a "slot". Each of the three appends a tick to its own file
every 5 ms; a paused one stops ticking."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelbench_harness.execution.device import DeviceEvaluator
from kernelbench_harness.execution.quiet import HostQuieter, continue_all, descendants

_TICKER = """
import subprocess, sys, time
path, child = sys.argv[1], sys.argv[2]
if child != "-":
    subprocess.Popen([sys.executable, "-c", sys.argv[3], child, "-", sys.argv[3]])
f = open(path, "a", buffering=1)
while True:
    f.write("x\\n")
    time.sleep(0.005)
"""

_RUNNER = """
import subprocess, sys, time
ticker, build, nvcc, slot = sys.argv[1:5]
b = subprocess.Popen([sys.executable, "-c", ticker, build, nvcc, ticker])
s = subprocess.Popen([sys.executable, "-c", ticker, slot, "-", ticker])
print(b.pid, s.pid, flush=True)
time.sleep(120)
"""


def _size(p: Path) -> int:
    return p.stat().st_size if p.exists() else 0


def _wait_until(cond, timeout_s: float = 10.0) -> bool:  # noqa: ANN001
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except OSError:
        return "?"


def _ticks_during(paths: list[Path], secs: float) -> list[int]:
    n0 = [_size(p) for p in paths]
    time.sleep(secs)
    return [_size(p) - n for p, n in zip(paths, n0)]


@pytest.fixture
def run(tmp_path: Path):
    """(runner pid, build pid, slot pid, the build's child pid, (build, nvcc, slot) tick files)."""
    build, nvcc, slot = tmp_path / "build", tmp_path / "nvcc", tmp_path / "slot"
    runner = subprocess.Popen([sys.executable, "-c", _RUNNER, _TICKER, str(build), str(nvcc), str(slot)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        build_pid, slot_pid = (int(x) for x in runner.stdout.readline().split())
        assert _wait_until(lambda: all(_size(p) > 0 for p in (build, nvcc, slot))), "the tickers did not start"
        child = [p for p in descendants(build_pid)]
        assert len(child) == 1
        yield runner.pid, build_pid, slot_pid, child[0], (build, nvcc, slot)
    finally:
        try:  # the whole stand-in run, paused or not (SIGKILL ends stopped processes too)
            os.killpg(runner.pid, signal.SIGKILL)
        except OSError:
            pass
        runner.wait()


def _stopped(*pids: int) -> bool:
    return all(_state(p) == "T" for p in pids)


def test_the_runs_other_processes_pause_and_the_slots_do_not(run) -> None:
    root, build_pid, slot_pid, nvcc_pid, (build, nvcc, slot) = run
    q = HostQuieter(root, keep=lambda: [slot_pid], max_s=5.0)
    assert q.pause() == 2  # the build and its child; not the slot
    try:
        assert _wait_until(lambda: _stopped(build_pid, nvcc_pid), 2.0)
        moved = _ticks_during([build, nvcc, slot], 0.3)
        assert moved[0] == 0 and moved[1] == 0, f"paused processes ran: {moved}"
        assert moved[2] > 0, "a kept slot was paused"
        assert _state(slot_pid) != "T"
    finally:
        q.resume()
    assert _wait_until(lambda: all(x > 0 for x in _ticks_during([build, nvcc], 0.1))), "still paused"
    assert q.last_s >= 0.3


def test_a_pause_ends_after_max_s_whatever_the_window_does(run) -> None:
    root, build_pid, slot_pid, nvcc_pid, (build, nvcc, _slot) = run
    q = HostQuieter(root, keep=lambda: [slot_pid], max_s=1.0)
    t0 = time.monotonic()
    assert q.pause() == 2
    assert _wait_until(lambda: _stopped(build_pid, nvcc_pid), 0.9), "not paused"
    assert _wait_until(lambda: not _stopped(build_pid) and not _stopped(nvcc_pid), 5.0), \
        "the watchdog did not continue them"
    assert time.monotonic() - t0 >= 0.95
    assert all(x > 0 for x in _ticks_during([build, nvcc], 0.2))
    q.resume()  # nothing left to continue: a no-op


def test_a_late_watchdog_does_not_end_the_next_pause(run) -> None:
    root, build_pid, slot_pid, nvcc_pid, _files = run
    q = HostQuieter(root, keep=lambda: [slot_pid], max_s=5.0)
    q.pause()
    q._expire(q._gen - 1)  # a timer of an earlier pause firing now
    time.sleep(0.05)
    assert _wait_until(lambda: _stopped(build_pid, nvcc_pid), 2.0)
    q.resume()
    assert _wait_until(lambda: not _stopped(build_pid) and not _stopped(nvcc_pid), 2.0)


def test_a_timing_window_pauses_the_run_and_records_it(run, tmp_path: Path) -> None:
    root, build_pid, slot_pid, nvcc_pid, (build, nvcc, slot) = run
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False, timing_lock=threading.Lock(),
                         quieter=HostQuieter(root, keep=lambda: [slot_pid]))
    try:
        with ev.timing_window("candidate") as w:
            assert _wait_until(lambda: _stopped(build_pid, nvcc_pid), 2.0)
            moved = _ticks_during([build, nvcc, slot], 0.3)
        assert moved[:2] == [0, 0] and moved[2] > 0, moved
        assert w["quiet_pids"] == 2 and w["quiet_s"] >= 0.3
        assert _wait_until(lambda: all(x > 0 for x in _ticks_during([build, nvcc], 0.1))), "still paused"
        # a window that raises continues them all the same
        with pytest.raises(RuntimeError):
            with ev.timing_window("candidate"):
                assert _wait_until(lambda: _stopped(build_pid, nvcc_pid), 2.0)
                raise RuntimeError("boom")
        assert _wait_until(lambda: not _stopped(build_pid) and not _stopped(nvcc_pid), 2.0)
        # and without a quieter, nothing pauses and nothing is recorded
        ev.quieter = None
        with ev.timing_window("candidate") as w:
            moved = _ticks_during([build, nvcc], 0.2)
        assert all(x > 0 for x in moved) and "quiet_pids" not in w
    finally:
        ev.close()


def test_descendants_leave_out_kept_subtrees_and_continue_all_undoes_a_pause(run) -> None:
    root, build_pid, slot_pid, nvcc_pid, _files = run
    assert set(descendants(root)) == {build_pid, slot_pid, nvcc_pid}
    assert set(descendants(root, [build_pid])) == {slot_pid}
    q = HostQuieter(root, keep=lambda: [slot_pid])
    q.pause()
    assert _wait_until(lambda: _stopped(build_pid, nvcc_pid), 2.0)
    continue_all(root, [slot_pid])  # as after a slot died mid-window
    assert _wait_until(lambda: not _stopped(build_pid) and not _stopped(nvcc_pid), 2.0)
    q.resume()
    with pytest.raises(ValueError):
        HostQuieter(root, keep=list, max_s=0)


def test_descendants_without_the_kernels_children_lists(run, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels built without CONFIG_PROC_CHILDREN have no /proc/<pid>/task/*/children: every process's
    parent is read instead, with the same answer."""
    from kernelbench_harness.execution import quiet

    root, build_pid, slot_pid, nvcc_pid, _files = run
    fast = set(descendants(root))
    monkeypatch.setattr(quiet, "_children_of", lambda pid: None)
    assert set(descendants(root)) == fast == {build_pid, slot_pid, nvcc_pid}
    assert set(descendants(root, [slot_pid])) == {build_pid, nvcc_pid}
