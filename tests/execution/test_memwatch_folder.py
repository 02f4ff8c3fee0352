"""A candidate's private folder counts against its memory limit: the run's scratch lives in /dev/shm, so its
files are the host's memory, and each file was bounded (RLIMIT_FSIZE) but not their sum (stop 39's second attack:
one candidate could take the host's shared memory while it ran)."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from kernelbench_harness.execution.process import ChildHandle, _rss_bytes


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "30"], start_new_session=True)  # its own group: kill() ends it


def _killed(h: ChildHandle, p: subprocess.Popen[bytes], timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and p.poll() is None:
        time.sleep(0.02)
    return p.poll() is not None


def test_files_in_the_private_folder_count_with_resident_memory(tmp_path: Path) -> None:
    p = _sleeper()
    h = ChildHandle(pid=p.pid, chan=None, launcher=None)  # type: ignore[arg-type]
    try:
        time.sleep(0.1)
        limit = _rss_bytes(p.pid) + (32 << 20)
        h.watch_memory(limit, interval_s=0.01, folder=tmp_path, folder_every=1)
        time.sleep(0.3)
        assert p.poll() is None  # under the limit: it runs on
        with open(tmp_path / "fill.bin", "wb") as f:  # 64 MiB of real blocks, beside its few MiB of memory
            f.write(b"\1" * (64 << 20))
        assert _killed(h, p), "the process was not ended"
        assert "private folder" in h.killed_reason and "over the limit" in h.killed_reason
    finally:
        h._stop.set()
        p.kill()
        p.wait()


def test_a_private_folder_of_too_many_files_ends_the_candidate(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ChildHandle, "FOLDER_MAX_FILES", 10)
    p = _sleeper()
    h = ChildHandle(pid=p.pid, chan=None, launcher=None)  # type: ignore[arg-type]
    try:
        sub = tmp_path / "a" / "b"
        sub.mkdir(parents=True)
        for i in range(11):
            (sub / f"f{i}").write_bytes(b"")
        h.watch_memory(1 << 40, interval_s=0.01, folder=tmp_path, folder_every=1)
        assert _killed(h, p)
        assert "more than 10 files" in h.killed_reason
    finally:
        h._stop.set()
        p.kill()
        p.wait()


def test_without_a_folder_only_resident_memory_counts(tmp_path: Path) -> None:
    p = _sleeper()
    h = ChildHandle(pid=p.pid, chan=None, launcher=None)  # type: ignore[arg-type]
    try:
        (tmp_path / "fill.bin").write_bytes(b"\1" * (64 << 20))
        h.watch_memory(_rss_bytes(p.pid) + (32 << 20), interval_s=0.01)
        time.sleep(0.5)
        assert p.poll() is None and not h.killed_reason
    finally:
        h._stop.set()
        p.kill()
        p.wait()
