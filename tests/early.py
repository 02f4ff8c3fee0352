"""Expensive set-ups that start as soon as the session knows it needs them, in the background.

The suite runs one test at a time and mostly keeps one core busy; work that a test only waits for (the
bundled C++ check, the precompiled header of test_build_pch, a whole ``kbench`` run whose stored results a
test then reads) can run on the other core meanwhile. A test module names its jobs in a module-level
``EARLY = {fixture_name: Early(...)}``; ``tests/conftest.py`` queues each one whose fixture a collected
test uses, in the order of the first test that uses it, and stops them all at the end of the session.

Queued jobs run one at a time, on one background thread (:func:`_dispatch`): the machine the suite is
meant for has two cores, and one job beside the tests keeps the second one busy without starving the
tests of the first (timing tests wait for windows and count seconds). ``Early.result()`` starts a job
itself when it has not started yet (a single test run by itself, or a test that came before its turn), so
a test sees the same result either way; the job's own assertions and exceptions reach the test that asks
for its result.

:func:`in_child` makes a job of a function of a test module that runs in a fresh interpreter (the work
of an in-process ``execute_run``, say): ``fn(folder)`` runs there, under the same environment and
``sys.path``, and what it returns comes back pickled.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ALL: list[Early] = []
_TMP = tempfile.gettempdir()  # a test may point tempfile elsewhere (monkeypatch) while a job starts
_ENV: list[dict[str, str]] = []
_QUEUE: list[Early] = []
_QUEUE_CV = threading.Condition()
_DISPATCHER: list[threading.Thread] = []
_STOPPING = threading.Event()


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
        self._wait_lock = threading.Lock()  # one caller waits for the work; the others for its result
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None
        _ALL.append(self)

    def start(self) -> None:
        with self._lock:
            if self._wait is None:
                self._folder = Path(tempfile.mkdtemp(prefix="kbench-early-", dir=_TMP))
                self._wait = self._start(self._folder, self._stoppers)

    @property
    def started(self) -> bool:
        return self._wait is not None

    def enqueue(self) -> None:
        """Run this job on the background thread after the jobs queued before it."""
        with _QUEUE_CV:
            if self.started or self in _QUEUE:
                return
            _QUEUE.append(self)
            if not _DISPATCHER:
                t = threading.Thread(target=_dispatch, name="kbench-early", daemon=True)
                _DISPATCHER.append(t)
                t.start()
            _QUEUE_CV.notify_all()

    @property
    def folder(self) -> Path:
        """The job's folder (the job is started if it was not)."""
        self.start()
        assert self._folder is not None
        return self._folder

    def result(self) -> Any:
        self.start()
        assert self._wait is not None
        with self._wait_lock:
            if not self._done:
                try:
                    self._result = self._wait()
                except BaseException as e:  # every caller sees it, not only the first
                    self._error = e
                self._done = True
        if self._error is not None:
            raise self._error
        return self._result

    def stop(self) -> None:
        with self._lock:  # a start under way registers its stoppers first
            stoppers = list(self._stoppers)
        for stop in stoppers:
            with contextlib.suppress(Exception):  # clean-up at the end of the session
                stop()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


def _dispatch() -> None:
    """Runs the queued jobs one after another (a job a test started itself meanwhile is passed over)."""
    while not _STOPPING.is_set():
        with _QUEUE_CV:
            while not _QUEUE and not _STOPPING.is_set():
                _QUEUE_CV.wait()
            if _STOPPING.is_set():
                return
            job = _QUEUE.pop(0)
        if job.started:  # a test asked for it before its turn and runs it
            continue
        with job._lock:
            if _STOPPING.is_set():  # the session ended meanwhile
                return
        with contextlib.suppress(BaseException):  # its test sees the error when it asks for the result
            job.result()


def freeze_environment() -> None:
    """Jobs started from now on get the environment as it is now: the tests that run meanwhile may change
    ``os.environ`` for themselves (monkeypatch) while a job starts on the background thread."""
    if not _ENV:
        _ENV.append(dict(os.environ))


def environ() -> dict[str, str]:
    """A copy of the environment for the processes a job starts (see :func:`freeze_environment`)."""
    return dict(_ENV[0] if _ENV else os.environ)


def stop_all() -> None:
    _STOPPING.set()
    with _QUEUE_CV:
        _QUEUE.clear()
        _QUEUE_CV.notify_all()
    for job in _ALL:
        job.stop()


# ---------------------------------------------------------------- jobs in a child interpreter

_CHILD = Path(__file__).resolve().parent / "early_child.py"


def _end_group(proc: subprocess.Popen[Any]) -> None:
    """Ends a child left running (a session cut short) and whatever it started: SIGTERM to its group first,
    so that ninja and the device slots end what they started, then SIGKILL."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _child_env() -> dict[str, str]:
    """The jobs' environment (:func:`environ`), with the folders of ``tests/`` that pytest put on ``sys.path``
    (where the test modules and their helpers import from) on the child's ``PYTHONPATH``."""
    tests = Path(__file__).resolve().parent
    ours = [p for p in sys.path if p and (Path(p).resolve() == tests or tests in Path(p).resolve().parents)]
    env = environ()
    path = os.pathsep.join([*dict.fromkeys(ours), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**env, "PYTHONPATH": path}


def in_child(fn: Callable[[Path], Any]) -> Callable[[Path, list[Callable[[], None]]], Callable[[], Any]]:
    """The start of an :class:`Early` job that calls ``fn(folder)`` (a module-level function of a test
    module) in a fresh Python interpreter, in a process group of its own; the wait returns what ``fn``
    returned (pickled), or raises an AssertionError with the child's traceback and output."""
    module, name = fn.__module__, fn.__qualname__

    def start(folder: Path, stoppers: list[Callable[[], None]]) -> Callable[[], Any]:
        out = folder / "early-result.pkl"
        log_path = folder / "early-child.log"
        with open(log_path, "w") as log:  # a file, not a pipe: nothing has to read it meanwhile
            proc = subprocess.Popen([sys.executable, str(_CHILD), module, name, str(folder), str(out)],
                                    cwd=folder, env=_child_env(),
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        stoppers.append(lambda: _end_group(proc))

        def wait() -> Any:
            code = proc.wait()
            log = log_path.read_text(errors="replace")[-6000:] if log_path.exists() else ""
            if not out.exists():
                raise AssertionError(f"{module}.{name} ended (exit code {code}) without a result:\n{log}")
            with open(out, "rb") as f:
                status, value = pickle.load(f)
            if status != "ok":
                raise AssertionError(f"{module}.{name} failed in its child process:\n{value}\n"
                                     f"--- its output ---\n{log}")
            return value

        return wait

    return start
