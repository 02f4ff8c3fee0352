"""The profiled call (kernel share, streams, launch witness) runs with the device to itself.

On an H200 (session 28) it ran under the slot's shared hold, beside other slots' untimed work: the same copy
kernel of the same candidate took 0.25 ms in one sweep and 6.3 ms in the next, and 11 of 248 kernel-share
verdicts flipped between two sweeps of identical candidates. It now runs inside the candidate's first timing
window, before the timing in the same hold of the device (or in a window of its own where nothing is timed).

On this CPU-only machine no call is profiled (there is no CUDA profiler), so the tests switch profiling on for a
CPU evaluator; the profile the candidate's process sends back then says the profiler failed, which leaves the
share unjudged and the verdict as it is.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from execution.evalkit import evaluate
from execution.test_outcomes import TRITON_OK
from kernelbench_harness.core import Outcome
from kernelbench_harness.execution import channel as channel_mod
from kernelbench_harness.execution.device import DeviceEvaluator


@pytest.fixture()
def watched(evaluator, monkeypatch):
    """A CPU evaluator that profiles its candidates' calls, and the log of the commands it sent its candidates'
    processes with the timing window each was sent in (None: outside any window)."""
    sent: list[tuple[str, int | None]] = []
    state: dict[str, Any] = {"window": None, "n": 0}
    real_window = DeviceEvaluator.timing_window

    @contextlib.contextmanager
    def window(self, what, timer_pid=None):
        with real_window(self, what, timer_pid) as w:
            state["n"] += 1
            state["window"] = state["n"]
            try:
                yield w
            finally:
                state["window"] = None

    real_send = channel_mod.Channel.send

    def send(self, obj):
        if isinstance(obj, dict) and "cmd" in obj:
            sent.append((obj["cmd"], state["window"]))
        return real_send(self, obj)

    monkeypatch.setattr(DeviceEvaluator, "timing_window", window)
    monkeypatch.setattr(DeviceEvaluator, "_profiles_calls", lambda self: True)
    monkeypatch.setattr(channel_mod.Channel, "send", send)
    yield evaluator, sent


def test_the_profiled_call_is_made_in_the_candidates_first_timing_window(watched) -> None:
    ev, sent = watched
    res = evaluate(ev, TRITON_OK)
    assert res.outcome is Outcome.CORRECT, res
    cmds = [c for c, _ in sent]
    assert cmds.count("profile") == 1, sent
    profile_window = dict(sent)["profile"]
    assert profile_window is not None, f"the profiled call was made outside a timing window: {sent}"
    # the same hold of the device as the timing that follows it, and before it
    time_windows = [w for c, w in sent if c == "time"]
    assert time_windows and time_windows[0] == profile_window, sent
    assert cmds.index("profile") < cmds.index("time")
    windows = res.extra["timing_windows"]
    assert len(windows) == 1 and windows[0].get("profiled") is True and windows[0]["what"] == "candidate"


def test_a_candidate_that_is_not_timed_is_profiled_in_a_window_of_its_own(watched) -> None:
    """A static cheat is not timed; its call is still profiled (the launch witness), with the device to itself."""
    ev, sent = watched
    res = evaluate(ev, TRITON_OK + "\ntorch.cuda.Event.elapsed_time = torch.cuda.Event.elapsed_time\n")
    assert res.outcome is Outcome.CHEAT, res
    cmds = [c for c, _ in sent]
    assert "time" not in cmds and cmds.count("profile") == 1, sent
    assert dict(sent)["profile"] is not None, f"the profiled call was made outside a timing window: {sent}"
    windows = res.extra["timing_windows"]
    assert [w["what"] for w in windows] == ["profile"] and windows[0]["profiled"] is True


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs (not gone, not a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] not in "ZX"
    except (OSError, IndexError):
        return False


def _watch_window_ends(monkeypatch) -> list[bool]:
    """Whether the timing process still ran as each timing window ended (one bool a window, in order)."""
    at_end: list[bool] = []
    real_window = DeviceEvaluator.timing_window

    @contextlib.contextmanager
    def window(self, what, timer_pid=None):
        with real_window(self, what, timer_pid) as w:
            try:
                yield w
            finally:
                at_end.append(_running(timer_pid))

    monkeypatch.setattr(DeviceEvaluator, "timing_window", window)
    return at_end


@pytest.mark.parametrize("unanswered", ["profile", "time"])
def test_a_candidate_that_runs_out_of_time_in_a_window_is_ended_before_the_window_is(
        evaluator, monkeypatch, unanswered: str) -> None:
    """A call that never answers (the command is dropped here: to the trusted side, a hung call) runs out of the
    candidate's time inside the window. Its process (a spinning kernel among its work) must be gone before the
    window gives the device up: the window takes the slot's shared hold back only after the windows queued
    meanwhile, and the ChannelTimeout handler that kills it runs after that (the profiled call used to run under
    the shared hold, where that handler killed it first)."""
    at_end = _watch_window_ends(monkeypatch)
    real_send = channel_mod.Channel.send

    def send(self, obj):
        if isinstance(obj, dict) and obj.get("cmd") == unanswered:
            return None
        return real_send(self, obj)

    monkeypatch.setattr(DeviceEvaluator, "_profiles_calls", lambda self: True)
    monkeypatch.setattr(channel_mod.Channel, "send", send)
    res = evaluate(evaluator, TRITON_OK, timeout_s=3.0)
    assert res.outcome is Outcome.TIMEOUT, res
    assert at_end and not any(at_end), f"the candidate's process still ran as its window ended: {at_end}"


def test_a_candidate_whose_profiled_call_raised_is_ended_before_the_window_is(evaluator, monkeypatch) -> None:
    """A profiled call that raises (README's attack C: a call that fails only under the profiler) is the
    candidate's runtime error, decided inside the window; the kernels it launched before raising may still run,
    so its process must be gone before the window gives the device up, as for a timeout."""
    from kernelbench_harness.execution import device as device_mod

    at_end = _watch_window_ends(monkeypatch)
    monkeypatch.setattr(DeviceEvaluator, "_profiles_calls", lambda self: True)
    # on this CPU the worker profiles nothing: its answer is read as a call that raised under the profiler
    monkeypatch.setattr(device_mod, "profiled_call_failure",
                        lambda profile: ("runtime_error", "the profiled call raised: RuntimeError: not here"))
    res = evaluate(evaluator, TRITON_OK)
    assert res.outcome is Outcome.RUNTIME_ERROR and "not here" in res.error, res
    assert at_end and not any(at_end), f"the candidate's process still ran as its window ended: {at_end}"


def test_the_wait_for_the_profiled_calls_window_is_not_the_candidates_time(evaluator, monkeypatch) -> None:
    """The window of the profiled call can wait for other slots' windows for seconds; that wait must not eat the
    candidate's time limit (it is not the candidate's: under the shared hold the call began at once)."""
    import time

    real_window = DeviceEvaluator.timing_window

    @contextlib.contextmanager
    def slow_window(self, what, timer_pid=None):
        time.sleep(4.0)  # other slots' windows go first
        with real_window(self, what, timer_pid) as w:
            yield w

    monkeypatch.setattr(DeviceEvaluator, "timing_window", slow_window)
    monkeypatch.setattr(DeviceEvaluator, "_profiles_calls", lambda self: True)
    res = evaluate(evaluator, TRITON_OK, timeout_s=3.0)
    assert res.outcome is Outcome.CORRECT, res
