"""Shared test setup: ``tests/`` is importable (``from fakes import FakeOpenAIServer``) and the
fake provider servers' fixtures (``openai_server``, ``anthropic_server``, ``gemini_server``) are loaded."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

pytest_plugins = ["fakes.fixtures"]

import os  # noqa: E402

# Precompiled headers cost ~45 CPU seconds each and are built in the background after the first
# C++ build; tests that merely build an extension would pay for one they never use.
# tests/pipeline/test_build_pch.py turns them back on.
os.environ.setdefault("KBENCH_PCH", "0")

import signal  # noqa: E402

# A suite started in the background by a non-interactive shell (``(pytest &)``, some CI wrappers) inherits SIGINT
# ignored, and so does every process it starts: the tests of Ctrl-C (a run stored as interrupted, a device worker
# ending on SIGINT) would then see runs that cannot be interrupted. A handler here is reset to the default in
# every program the tests start.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_finish(session) -> None:
    """Queue the background set-ups (tests/early.py) of the fixtures the collected tests use, in the order
    of the first test that uses each: they run one at a time beside the tests."""
    if session.config.option.collectonly:
        return
    from early import freeze_environment

    freeze_environment()  # before any test changes os.environ for itself
    for item in session.items:
        jobs = getattr(getattr(item, "module", None), "EARLY", None) or {}
        wanted = [job for name, job in jobs.items() if name in getattr(item, "fixturenames", ())]
        if wanted and not _skipped(item):
            for job in wanted:
                job.enqueue()


def _skipped(item) -> bool:
    """Whether a skip or skipif mark skips ``item`` (then the work its fixtures need is not queued)."""
    try:
        from _pytest.skipping import evaluate_skip_marks
    except ImportError:  # another pytest: queue it anyway
        return False
    try:
        return evaluate_skip_marks(item) is not None
    except Exception:  # a mark pytest will report on when the test runs
        return False


def pytest_sessionfinish(session, exitstatus) -> None:
    from early import stop_all

    stop_all()
