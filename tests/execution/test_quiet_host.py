"""A quiet host while a slot times (:mod:`kernelbench_harness.execution.quiet`): the run's builds and
warm-ups pause, the device slots (and the candidates they time) do not, and nothing stays paused.

Session 9 on an H200: timings the host paces slowed by 20-70% while 12 processes kept other cores busy."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelbench_harness.execution.device import DeviceEvaluator
from kernelbench_harness.execution.quiet import HostQuieter, continue_all, descendants

# a process that appends a tick every 5 ms to a file, and optionally starts one child doing the same
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


def _ticker(path: Path, child: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _TICKER, str(path), str(child) if child else "-", _TICKER])


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
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]


def _ticks_during(paths: list[Path], secs: float) -> list[int]:
    n0 = [_size(p) for p in paths]
    time.sleep(secs)
    return [_size(p) - n for p, n in zip(paths, n0)]


@pytest.fixture
def tickers(tmp_path: Path):
    """A 'build' with a child of its own (nvcc under a build worker) and a 'slot' (kept running)."""
    build, nvcc, slot = tmp_path / "build", tmp_path / "nvcc", tmp_path / "slot"
    procs = [_ticker(build, nvcc), _ticker(slot)]
    assert _wait_until(lambda: all(_size(p) > 0 for p in (build, nvcc, slot))), "the tickers did not start"
    yield procs, (build, nvcc, slot)
    continue_all(os.getpid())
    for p in procs:
        p.kill()
        p.wait()
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def test_the_runs_other_processes_pause_and_the_slots_do_not(tickers) -> None:
    procs, (build, nvcc, slot) = tickers
    q = HostQuieter(os.getpid(), keep=lambda: [procs[1].pid], max_s=5.0)
    n = q.pause()
    try:
        assert n >= 2  # the build and its child (and any other child of this test process)
        moved = _ticks_during([build, nvcc, slot], 0.3)
        assert moved[0] == 0 and moved[1] == 0, f"paused processes ran: {moved}"
        assert moved[2] > 0, "a kept slot was paused"
        assert _state(procs[0].pid) == "T" and _state(procs[1].pid) != "T"
    finally:
        q.resume()
    assert _wait_until(lambda: all(x > 0 for x in _ticks_during([build, nvcc], 0.1))), "still paused"
    assert q.last_s >= 0.3


def test_a_pause_ends_after_max_s_whatever_the_window_does(tickers) -> None:
    procs, (build, nvcc, _slot) = tickers
    q = HostQuieter(os.getpid(), keep=lambda: [procs[1].pid], max_s=0.3)
    assert q.pause() >= 2
    time.sleep(0.05)
    assert _state(procs[0].pid) == "T"
    assert _wait_until(lambda: _state(procs[0].pid) != "T", timeout_s=3.0), "the watchdog did not continue it"
    assert all(x > 0 for x in _ticks_during([build, nvcc], 0.2))
    q.resume()  # nothing left to continue: a no-op


def test_a_timing_window_pauses_the_run_and_records_it(tickers, tmp_path: Path) -> None:
    procs, (build, nvcc, slot) = tickers
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False, timing_lock=threading.Lock(),
                         quieter=HostQuieter(os.getpid(), keep=lambda: [procs[1].pid]))
    try:
        with ev.timing_window("candidate") as w:
            moved = _ticks_during([build, nvcc, slot], 0.3)
        assert moved[:2] == [0, 0] and moved[2] > 0, moved
        assert w["quiet_pids"] >= 2 and w["quiet_s"] >= 0.3
        assert all(x > 0 for x in _ticks_during([build, nvcc], 0.2)), "still paused after the window"
        # and without a quieter, nothing pauses and nothing is recorded
        ev.quieter = None
        with ev.timing_window("candidate") as w:
            moved = _ticks_during([build, nvcc], 0.2)
        assert all(x > 0 for x in moved) and "quiet_pids" not in w
    finally:
        ev.close()


def test_descendants_leave_out_kept_subtrees(tickers) -> None:
    procs, _ = tickers
    every = descendants(os.getpid())
    assert procs[0].pid in every and procs[1].pid in every
    kept = descendants(os.getpid(), [procs[0].pid])
    assert procs[0].pid not in kept and procs[1].pid in kept
    assert not set(descendants(procs[0].pid)) & set(kept)  # the build's child went with it
    with pytest.raises(ValueError):
        HostQuieter(os.getpid(), keep=list, max_s=0)
