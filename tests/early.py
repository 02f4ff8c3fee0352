"""Expensive set-ups that start as soon as the session knows it needs them, in the background.

The suite runs one test at a time and mostly keeps one core busy; a C++ build that a test only
waits for (the bundled C++ check, the precompiled header of test_build_pch) can run on the other
core meanwhile. A test module names its jobs in a module-level ``EARLY = {fixture_name: Early(...)}``;
``tests/conftest.py`` starts each one whose fixture a collected test uses, and stops them all at the
end of the session. ``Early.result()`` starts the job itself when it was not started early (a
single test run by itself), so a test sees the same result either way.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ALL: list[Early] = []


class Early:
    """``start(folder, stoppers) -> wait``: begins the work in ``folder`` (a fresh temporary folder),
    may append callables to ``stoppers`` that end what it started, and returns a callable that waits
    for the work and returns its result."""

    def __init__(self, start: Callable[[Path, list[Callable[[], None]]], Callable[[], Any]]) -> None:
        self._start = start
        self._wait: Callable[[], Any] | None = None
        self._folder: Path | None = None
        self._stoppers: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._done = False
        self._result: Any = None
        _ALL.append(self)

    def start(self) -> None:
        with self._lock:
            if self._wait is None:
                self._folder = Path(tempfile.mkdtemp(prefix="kbench-early-"))
                self._wait = self._start(self._folder, self._stoppers)

    @property
    def folder(self) -> Path:
        """The job's folder (the job is started if it was not)."""
        self.start()
        assert self._folder is not None
        return self._folder

    def result(self) -> Any:
        self.start()
        assert self._wait is not None
        if not self._done:
            self._result = self._wait()
            self._done = True
        return self._result

    def stop(self) -> None:
        for stop in self._stoppers:
            with contextlib.suppress(Exception):  # clean-up at the end of the session
                stop()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


def stop_all() -> None:
    for job in _ALL:
        job.stop()
