"""``scripts/window_drains.py``: the time a sweep's device sat with a timing window asked for and none running."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "window_drains", Path(__file__).resolve().parents[1] / "scripts" / "window_drains.py")
window_drains = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(window_drains)  # type: ignore[union-attr]


def _row(pid: int, *windows: tuple[float, float, float]) -> tuple:
    """A result as ``lane_small_waits.load`` gives it, with windows ``(asked, start, end)``."""
    return (1, pid, {"total": 1.0}, {"timing_windows": [{"start": s, "end": e, "host_lock_wait_s": s - a}
                                                         for a, s, e in windows]}, 0.0)


def test_a_drain_counts_from_the_later_of_the_request_and_the_last_windows_end() -> None:
    rows = [_row(1, (0.0, 2.0, 3.0)),    # asked at 0, nothing before: drained 2 s
            _row(2, (1.0, 3.5, 4.0)),    # asked during the first window: drained from its end (3.0), 0.5 s
            _row(3, (10.0, 10.0, 11.0)),  # got the device at once
            _row(4, (10.5, 11.0, 12.0))]  # asked during the third window and started at its end: no drain
    got = window_drains.drains(rows)
    assert [(round(d, 6), job) for d, _since, _start, job in got] == [(2.0, "L1/1"), (0.5, "L1/2"), (0.0, "L1/3"),
                                                                        (0.0, "L1/4")]
    assert got[1][1] == pytest.approx(3.0)  # the drain began when the window before it ended


def test_windows_are_taken_in_the_order_they_started_whatever_the_order_of_the_results() -> None:
    rows = [_row(2, (1.0, 3.5, 4.0)), _row(1, (0.0, 2.0, 3.0))]
    assert [job for *_x, job in window_drains.drains(rows)] == ["L1/1", "L1/2"]
    assert sum(d for d, *_x in window_drains.drains(rows)) == pytest.approx(2.5)


def test_the_steps_a_job_was_in_during_a_drain_are_those_overlapping_it() -> None:
    extra = {"steps": [["reference", 0.0, 2.0], ["start", 2.0, 2.5], ["build_construct", 2.5, 6.0],
                       ["correctness", 6.0, 9.0], ["bad"]]}
    got = window_drains.steps_during(extra, 1.5, 3.0)
    assert [(n, round(s, 6)) for n, s in got] == [("reference", 0.5), ("start", 0.5), ("build_construct", 0.5)]
    assert window_drains.steps_during({}, 0.0, 1.0) == []  # stored before steps were


def test_the_steps_the_windows_waited_for_are_summed_over_the_drains_and_the_other_jobs() -> None:
    waiting = _row(1, (0.0, 2.0, 3.0))  # asked at 0, started at 2: a 2 s drain
    other = (1, 2, {"total": 1.0}, {"steps": [["first_call", -1.0, 1.5], ["correctness", 1.5, 4.0]]}, 0.0)
    own = (1, 1, {"total": 1.0}, {"steps": [["build_construct", 0.0, 2.0]]}, 0.0)  # the waiting job's: not counted
    rows = [waiting, other]
    ds = window_drains.drains(rows)
    by = window_drains.steps_in_drains(rows + [own], ds)
    assert {k: round(v, 6) for k, v in by.items()} == {"first_call": 1.5, "correctness": 0.5}
