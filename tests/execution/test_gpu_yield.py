"""A slot's untimed stretch gives way to a timing window queued on the same device (``--gpus 0,0,0``).

A slot holds the device's host lock shared for its whole candidate (process start, build, correctness,
rechecks: seconds), and a window takes it exclusively, so before this a window waited for the end of
every other slot's candidate: in session 9 three slots on one H200 were slower than two. Now, where the
candidate's process waits for the trusted side's next command, a slot that sees a window queued
(:meth:`HostDeviceLock.contended`) stops that process, gives the lock up and takes it back after the
window (:meth:`DeviceEvaluator._gpu_yield`).

Simulated on the CPU with lock handles in threads (``flock`` locks on separate open files conflict as
between processes)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from execution.evalkit import AFFINE, FAST_KBENCH, describe, evaluate
from kernelbench_harness.core import Outcome
from kernelbench_harness.execution.device import DeviceEvaluator
from kernelbench_harness.execution.scratch import HostDeviceLock


def _key() -> str:
    return f"test-{uuid.uuid4().hex}"


def _wait_until(cond, timeout_s: float = 10.0) -> bool:  # noqa: ANN001
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return False


def test_contended_sees_a_queued_exclusive_holder_and_only_that():
    key = _key()
    holder, window = HostDeviceLock(key), HostDeviceLock(key)
    holder.acquire(shared=True)
    try:
        assert not holder.contended()  # nobody queued
        other = HostDeviceLock(key)
        other.acquire(shared=True)  # another shared holder is no reason to give way
        assert not holder.contended()
        other.release()
        got: list[float] = []
        t = threading.Thread(target=lambda: got.append(window.acquire()))
        t.start()
        assert _wait_until(holder.contended), "a window waiting for the lock is not seen"
        assert not got  # it waits for the shared hold
        holder.release()
        t.join(5)
        assert got, "the window did not get the lock once the shared holder let go"
        window.release()
        assert not holder.contended()
    finally:
        holder.release()
        window.release()


def _steps(ev: DeviceEvaluator, n: int, step_s: float, spans: list[list[float]], yields: bool) -> None:
    with ev._gpu_work():
        for _ in range(n):
            t0 = time.time()
            time.sleep(step_s)
            spans.append([t0, time.time()])
            if yields:
                ev._gpu_yield(None)


@pytest.mark.parametrize("yields", [True, False])
def test_a_queued_window_waits_for_one_step_not_the_whole_stretch(tmp_path: Path, yields: bool) -> None:
    key = _key()
    a = DeviceEvaluator("cpu", scratch_dir=tmp_path / "a", sandbox=False, timing_lock=threading.Lock())
    b = DeviceEvaluator("cpu", scratch_dir=tmp_path / "b", sandbox=False, timing_lock=threading.Lock())
    a.host_lock_key = b.host_lock_key = key
    steps: list[list[float]] = []
    try:
        t = threading.Thread(target=_steps, args=(a, 8, 0.1, steps, yields))
        t.start()
        assert _wait_until(lambda: len(steps) >= 1)
        with b.timing_window("candidate") as w:
            time.sleep(0.05)
        t.join(10)
        assert not t.is_alive()
        waited = w["host_lock_wait_s"]
        for s in steps:  # never inside the window, either way
            assert not (s[0] < w["end"] and w["start"] < s[1]), (s, w)
        if yields:
            assert waited < 0.35, f"the window waited {waited:.2f} s: more than a step or two of 0.1 s"
        else:
            assert waited > 0.45, f"without yields the window waits for the stretch (6-7 steps left), not {waited:.2f} s"
    finally:
        a.close()
        b.close()


def test_the_candidate_process_is_stopped_while_it_gives_way(tmp_path: Path) -> None:
    """No thread of the yielding slot's candidate can launch work into the other slot's window."""
    key = _key()
    ticks = tmp_path / "ticks"
    # a stand-in candidate process that appends a tick every 5 ms, in its own process group like a
    # sandboxed candidate (setsid)
    proc = subprocess.Popen([sys.executable, "-c",
                             "import time,sys\nf=open(sys.argv[1],'a',buffering=1)\n"
                             "while True:\n    f.write('x\\n'); time.sleep(0.005)\n", str(ticks)],
                            start_new_session=True)
    a = DeviceEvaluator("cpu", scratch_dir=tmp_path / "a", sandbox=True)
    a.host_lock_key = key
    window = HostDeviceLock(key)
    try:
        assert _wait_until(lambda: ticks.exists() and ticks.stat().st_size > 0)
        during: list[int] = []
        states: list[str] = []

        def other_slot() -> None:
            window.acquire()  # queued behind a's shared hold until a gives way
            try:
                n0 = ticks.stat().st_size
                states.append(Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0])
                time.sleep(0.2)
                during.append(ticks.stat().st_size - n0)
            finally:
                window.release()

        with a._gpu_work():
            t = threading.Thread(target=other_slot)
            t.start()
            assert _wait_until(a._gpu_share.contended)
            phase: dict[str, float] = {}
            waited = a._gpu_yield(SimpleNamespace(pid=proc.pid), phase)
            t.join(5)
            assert a._gpu_share is not None  # held again, shared
        assert states == ["T"], f"the candidate's process was not stopped during the window: {states}"
        assert during == [0], f"the candidate's process ran during the other slot's window: {during}"
        assert waited >= 0.2 and phase["yields"] == 1.0 and phase["yield_wait"] == pytest.approx(waited)
        size = ticks.stat().st_size
        assert _wait_until(lambda: ticks.stat().st_size > size), "the process was not let go on afterwards"
    finally:
        proc.kill()
        proc.wait()
        window.release()
        a.close()


def test_a_process_that_answered_just_before_its_mid_step_stop_is_let_go_on_without_giving_way(tmp_path: Path) -> None:
    """Mid-step (a build, or a compile the process announced), the step can end between the trusted side's last
    look and the stop: after its "off" notice the process launches the freshly compiled kernel at once. With its
    answer already waiting on the channel, the slot keeps the lock (the window waits for the next yield point)
    and the process goes on; with nothing waiting, the same call gives way."""
    key = _key()
    a = DeviceEvaluator("cpu", scratch_dir=tmp_path / "a", sandbox=False)
    a.host_lock_key = key
    window = HostDeviceLock(key)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pending = [True]
    h = SimpleNamespace(pid=proc.pid, chan=SimpleNamespace(pending=lambda: pending[0]))
    got: list[float] = []

    def other_slot() -> None:
        got.append(window.acquire(timeout_s=10.0))
        time.sleep(0.1)
        window.release()

    try:
        with a._gpu_work():
            t = threading.Thread(target=other_slot)
            t.start()
            assert _wait_until(a._gpu_share.contended)
            phase: dict[str, float] = {}
            assert a._gpu_yield(h, phase, time.monotonic() + 5, midstep=True) == 0.0
            time.sleep(0.1)
            assert phase == {} and not got, "the window got the device from a process that had answered"
            assert Path(f"/proc/{proc.pid}/stat").read_text().rsplit(") ", 1)[1][0] != "T"
            pending[0] = False
            waited = a._gpu_yield(h, phase, time.monotonic() + 5, midstep=True)
            t.join(5)
            assert got and phase.get("midstep_yields") == 1.0 and waited >= 0.1, phase
    finally:
        proc.kill()
        proc.wait()
        window.release()
        a.close()


def test_without_a_queued_window_nothing_gives_way(tmp_path: Path) -> None:
    a = DeviceEvaluator("cpu", scratch_dir=tmp_path / "a", sandbox=False)
    a.host_lock_key = _key()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert a._gpu_yield(None) == 0.0  # no hold at all
        with a._gpu_work():
            phase: dict[str, float] = {}
            assert a._gpu_yield(SimpleNamespace(pid=proc.pid), phase) == 0.0
            assert phase == {}
            assert Path(f"/proc/{proc.pid}/stat").read_text().rsplit(") ", 1)[1][0] != "T"
    finally:
        proc.kill()
        proc.wait()
        a.close()


def test_holders_name_the_processes_on_the_lock_files() -> None:
    key = _key()
    a, b = HostDeviceLock(key), HostDeviceLock(key)
    assert a.holders() == set()
    a.acquire(shared=True)
    try:
        assert a.holders() == {os.getpid()}
        with pytest.raises(TimeoutError):
            b.acquire(timeout_s=0.1)  # held shared: no exclusive within the limit, and nothing left held
        assert b._fd < 0
    finally:
        a.release()
    assert b.acquire(timeout_s=1.0) >= 0.0
    b.release()


def _holder_of(path: Path) -> tuple[subprocess.Popen, SimpleNamespace, list[str]]:
    """A stand-in candidate process that opens ``path`` read-only and holds an exclusive flock on it; a
    handle whose ``kill`` records why and kills it; the list of reasons."""
    evil = subprocess.Popen([sys.executable, "-c", "import fcntl,os,sys,time\n"
                             "fd=os.open(sys.argv[1],os.O_RDONLY); fcntl.flock(fd,fcntl.LOCK_EX); print('held',flush=True)\n"
                             "time.sleep(60)", str(path)], stdout=subprocess.PIPE, text=True)
    assert evil.stdout.readline().strip() == "held"
    killed: list[str] = []
    return evil, SimpleNamespace(pid=evil.pid, kill=lambda why: (killed.append(why), evil.kill())), killed


@pytest.mark.parametrize("held", ["turnstile", "ledger"])
def test_a_candidate_holding_the_lock_files_is_a_cheat_and_is_killed(tmp_path: Path, held: str) -> None:
    """A candidate can open the lock's turnstile (it needs only read access) and take it: its own slot
    would then give way and wait forever on the lock its stopped process holds. The memory ledger's lock
    file (an flock the run's slots share, in the temp folder) likewise: holding it would make every slot's
    claim wait and then update the ledger unlocked."""
    from kernelbench_harness.execution.channel import ChannelError
    from kernelbench_harness.execution.memledger import MemoryLedger

    key = _key()
    turn = HostDeviceLock(key).turn_path
    turn.parent.mkdir(parents=True, exist_ok=True)
    turn.touch()
    ledger_lock = tmp_path / "ledger.lock"
    ledger_lock.touch()
    evil, h, killed = _holder_of(turn if held == "turnstile" else ledger_lock)
    a = DeviceEvaluator("cpu", scratch_dir=tmp_path / "a", sandbox=False,
                        window_queue=(bytearray([0, 1]), 0),  # another slot's window is queued
                        memory_ledger=MemoryLedger([0.0, 0.0], [-1.0, 0.0], str(ledger_lock), 0))
    a.host_lock_key = key
    lk = HostDeviceLock(key)
    try:
        # the slot holds the main lock shared, as from before the candidate took the turnstile
        fd = lk._open(lk.path)
        fcntl.flock(fd, fcntl.LOCK_SH)
        lk._fd, lk.shared = fd, True
        a._gpu_share = lk
        with pytest.raises(ChannelError, match="lock files"):
            a._gpu_yield(h, {}, time.monotonic() + 5)
        assert killed == ["device lock tamper"]
        assert evil.wait(5) is not None
    finally:
        a._gpu_share = None
        evil.kill()
        evil.wait()
        lk.release()
        a.close()


def test_giving_way_past_the_candidates_deadline_is_a_timeout_with_the_lock_held_again(tmp_path: Path) -> None:
    from kernelbench_harness.execution.channel import ChannelTimeout

    key = _key()
    a = DeviceEvaluator("cpu", scratch_dir=tmp_path / "a", sandbox=False)
    a.host_lock_key = key
    window = HostDeviceLock(key)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed: list[str] = []
    h = SimpleNamespace(pid=proc.pid, kill=lambda why: killed.append(why))
    try:
        with a._gpu_work():
            t = threading.Thread(target=lambda: (window.acquire(), time.sleep(1.0), window.release()))
            t.start()
            assert _wait_until(a._gpu_share.contended)
            with pytest.raises(ChannelTimeout):
                a._gpu_yield(h, {}, time.monotonic() + 0.2)  # the window lasts 1 s
            assert killed and "timeout" in killed[0]
            assert a._gpu_share is not None and a._gpu_share._fd >= 0 and a._gpu_share.shared
            t.join(5)
    finally:
        proc.kill()
        proc.wait()
        a.close()


def _window_cuts_in(monkeypatch: pytest.MonkeyPatch, window: HostDeviceLock, when, hold_s: float = 0.1) -> dict:  # noqa: ANN001
    """Patch ``DeviceEvaluator._gpu_yield``: at the first call for which ``when(h, midstep)`` holds, another slot
    queues a window (``window``, held ``hold_s``) before the call goes on. Returns what is seen: ``calls`` (every
    call), ``thread``, ``wait`` (the window's wait for the lock, s) and ``state`` (the candidate's process state
    letter during the window)."""
    seen: dict = {"calls": 0}
    orig = DeviceEvaluator._gpu_yield

    def cut_in(self, h, phase=None, deadline=None, midstep=False):  # noqa: ANN001, ANN202
        seen["calls"] += 1
        if "thread" not in seen and when(h, midstep):

            def other_slot() -> None:
                seen["wait"] = window.acquire(timeout_s=5.0)
                try:
                    if h is not None:
                        seen["state"] = Path(f"/proc/{h.pid}/stat").read_text().split(") ")[1][0]
                    time.sleep(hold_s)
                finally:
                    window.release()

            t = threading.Thread(target=other_slot)
            t.start()
            seen["thread"] = t
            assert _wait_until(self._gpu_share.contended)
        return orig(self, h, phase, deadline, midstep)

    monkeypatch.setattr(DeviceEvaluator, "_gpu_yield", cut_in)
    return seen


def test_a_candidate_evaluates_alike_when_a_window_cuts_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on the CPU: another slot's window arrives once the candidate is built (before it is
    constructed); the slot gives way there (its candidate's process stopped meanwhile) and the verdict
    is unchanged."""
    from execution.test_reference_budget import CORRECT

    key = _key()
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    ev.host_lock_key = key
    window = HostDeviceLock(key)
    # after "built": the process waits for "construct"
    seen = _window_cuts_in(monkeypatch, window, lambda h, midstep: h is not None and not midstep)
    try:
        res = evaluate(ev, CORRECT, AFFINE)
        seen["thread"].join(5)  # type: ignore[attr-defined]
        assert res.outcome is Outcome.CORRECT, describe(res)
        assert res.phase_s.get("yields") == 1.0 and res.phase_s["yield_wait"] >= 0.1, res.phase_s
        assert seen.get("state") == "T"
        assert seen["calls"] >= 4  # before the process, after its build, after construction, per trial
        assert "trial_call_first" in res.phase_s
    finally:
        window.release()
        ev.close()


def test_memory_share_is_a_fraction(tmp_path: Path) -> None:
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="memory_share"):
            DeviceEvaluator("cpu", scratch_dir=tmp_path / "x", sandbox=False, memory_share=bad)


def test_the_trusted_side_out_of_memory_judging_is_a_harness_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """L1/19 on an H200 (session 10): the trusted side ran out of device memory judging the re-check beside
    the candidate's timing copies. That is the harness's failure (with several slots on a GPU, a
    neighbour's memory counts too), marked ``harness_error``, not the candidate's ``oom``."""
    import torch

    from execution.test_reference_budget import CORRECT
    from kernelbench_harness.execution.device import ProblemContext, ReferenceError_

    calls: list[bool] = []

    def oom(self, outs, set_idx, round_, inputs, tight):  # noqa: ANN001, ANN202
        calls.append(tight)
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(ProblemContext, "_compare_once", oom)
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    try:
        ctx = ev.context(AFFINE, FAST_KBENCH, 0)

        with pytest.raises(ReferenceError_) as ei:
            ctx.compare_on(0, None, [torch.zeros(1)])
        assert ei.value.oom and calls == [False]  # off a GPU, no second try
        monkeypatch.setattr(ProblemContext, "compare", lambda self, outs, i: (_ for _ in ()).throw(
            ReferenceError_("the reference fails on input set 0 at comparison: out of memory", oom=True)))
        res = evaluate(ev, CORRECT, AFFINE)
        assert res.outcome is Outcome.RUNTIME_ERROR, describe(res)
        assert res.extra.get("harness_error") and res.extra.get("trusted_oom") and res.extra.get("reference_error")
        assert "out of memory" in (res.error or "")
    finally:
        ev.close()


def test_the_runs_queued_windows_follow_each_other_while_the_other_slots_wait(tmp_path: Path) -> None:
    """Two slots queue windows while a third computes in steps: the third gives way once, and both
    windows run before it takes another step (window_queue). Without the queue the third slot took the
    lock back between the two windows, and the second window waited for one more of its steps."""
    key = _key()
    run_lock = threading.Lock()
    flags = [0, 0, 0]  # the run's per-device window queue (a multiprocessing.Array between processes)
    evs = [DeviceEvaluator("cpu", scratch_dir=tmp_path / f"s{i}", sandbox=False, timing_lock=run_lock,
                           window_queue=(flags, i)) for i in range(3)]
    for ev in evs:
        ev.host_lock_key = key
    steps: list[list[float]] = []
    windows: list[dict] = []
    errors: list[BaseException] = []

    go = threading.Event()
    holding: list[int] = []

    def timer(ev: DeviceEvaluator) -> None:
        try:
            # as a real slot: its candidate's untimed work holds the lock shared, then it queues its window
            with ev._gpu_work():
                holding.append(1)
                go.wait(10)
                with ev.timing_window("candidate") as w:
                    time.sleep(0.2)
                windows.append(w)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    try:
        ts = [threading.Thread(target=timer, args=(ev,)) for ev in evs[1:]]
        for x in ts:
            x.start()
        assert _wait_until(lambda: len(holding) == 2)
        t = threading.Thread(target=_steps, args=(evs[0], 6, 0.3, steps, True))
        t.start()
        assert _wait_until(lambda: len(steps) >= 1)
        time.sleep(0.05)  # in the middle of its second step
        go.set()
        for x in ts + [t]:
            x.join(20)
        assert not errors, errors
        assert len(windows) == 2 and len(steps) == 6
        first, second = sorted(windows, key=lambda w: w["start"])
        for s in steps:
            assert not (s[0] < second["end"] and first["start"] < s[1]), \
                f"slot 0 ran a step {s} between or inside the queued windows {first['start']}-{second['end']}"
        assert second["start"] - first["end"] < 0.15, "the second window waited for another step of slot 0"
        assert flags == [0, 0, 0]
    finally:
        for ev in evs:
            ev.close()



# a reference whose model takes 1 s to build on the host and whose forward takes 0.2 s: its set-up is a
# stretch of several seconds (11 forwards under kbench's float64-bound judge, with 5 correctness sets)
_SLOW_SETUP_CODE = '''\
import time
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        time.sleep(1.0)

    def forward(self, x):
        time.sleep(0.2)
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
'''


def test_a_window_queued_during_a_set_up_waits_neither_for_its_host_work_nor_for_all_its_forwards(tmp_path: Path) -> None:
    """The reference's set-up holds the slot's shared hold only for device work: a window queued while its
    model is built on the host gets the device at once, and one queued while it evaluates the reference
    waits for one forward, not for the rest of the set-up (H200 session 18: windows waited 19.5 s for
    L3/2's set-up, and every other slot with them)."""
    from kernelbench_harness.core import Problem

    problem = Problem(1, 903, "SlowSetUp_test", _SLOW_SETUP_CODE, "tests/execution/test_gpu_yield.py")
    key = _key()
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    ev.host_lock_key = key
    window = HostDeviceLock(key)
    phase: dict[str, float] = {}
    done: dict[str, object] = {}

    def slot() -> None:
        with ev._gpu_work():
            t0 = time.perf_counter()
            done["ctx"] = ev.context(problem, FAST_KBENCH, 7, phase)
            done["setup_s"] = time.perf_counter() - t0
            # the hold is back once the set-up is done: no window gets the lock meanwhile
            probe = HostDeviceLock(key)
            try:
                probe.acquire(timeout_s=0.1)
                done["held"] = False
                probe.release()
            except TimeoutError:
                done["held"] = True

    t = threading.Thread(target=slot)
    try:
        t.start()
        time.sleep(0.4)  # the model is being built on the host (1 s)
        first = window.acquire(timeout_s=5.0)
        window.release()
        time.sleep(1.2)  # past the build: the reference's forwards (0.2 s each)
        second = window.acquire(timeout_s=10.0)
        window.release()
        t.join(20)
        assert not t.is_alive()
        assert done.get("held") is True, done
        assert done["setup_s"] > 2.5, done  # the stretch went on around the windows
        assert first < 0.3, f"a window waited {first:.2f} s for the reference's model to be built on the host"
        assert second < 0.5, f"a window waited {second:.2f} s for the reference's forwards: more than one"
        assert phase.get("yields", 0) >= 1 and phase.get("yield_wait", 0) >= 0.0, phase
    finally:
        window.release()
        ev.close()


def test_a_window_cuts_into_a_candidates_build_and_construction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate's build (its module imported) and construction (``ModelNew`` built) are host work: a
    window another slot queues meanwhile gets the device with the candidate's process stopped mid-step
    (``midstep_yields``), instead of waiting for the step to end; the verdict is unchanged."""
    from execution.test_reference_budget import CORRECT

    slow = "import time as _t\n_t.sleep(1.5)\n" + CORRECT
    key = _key()
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    ev.host_lock_key = key
    window = HostDeviceLock(key)
    # the first poll in the build: the import sleeps 1.5 s
    seen = _window_cuts_in(monkeypatch, window, lambda h, midstep: midstep)
    try:
        res = evaluate(ev, slow, AFFINE)
        seen["thread"].join(5)  # type: ignore[attr-defined]
        assert res.outcome is Outcome.CORRECT, describe(res)
        assert seen.get("state") == "T", seen  # stopped mid-build while the other slot timed
        assert seen["wait"] < 0.5, f"the window waited {seen['wait']:.2f} s: for the build's 1.5 s sleep"
        assert res.phase_s.get("midstep_yields", 0) >= 1, res.phase_s
    finally:
        window.release()
        ev.close()


def test_losing_the_lock_while_the_float64_twin_is_set_up_is_the_harness_s_failure(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The twin's set-up treats its own failures as "no float64 reference" (judged with allclose); a hold on the
    device that could not be taken back is not one of them: it propagates, and the judge is not weakened."""
    from kernelbench_harness.execution.device import HostLockLost

    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    ev.host_lock_key = _key()
    calls: list[int] = []
    orig = DeviceEvaluator._take_shared

    def flaky(self, lk, deadline=None):  # noqa: ANN001, ANN202
        calls.append(1)
        if len(calls) == 3:  # the set-up's third host stretch: the host copy for the float64 twin
            raise OSError("lock files gone")
        return orig(self, lk, deadline)

    monkeypatch.setattr(DeviceEvaluator, "_take_shared", flaky)
    try:
        with ev._gpu_work():
            with pytest.raises(HostLockLost, match="host lock back"):
                ev.context(AFFINE, FAST_KBENCH, 7)
        assert len(calls) == 3
        assert not ev._contexts, "a context judged without its float64 twin was kept"
    finally:
        ev.close()


def test_a_candidate_stopped_mid_build_is_not_timed_out_for_the_windows_it_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its build deadline moves by the time it was stopped: windows queued for longer than its build had left
    do not make it a timeout."""
    from execution.test_reference_budget import CORRECT

    # a second of the process's own CPU time, not a sleep: a sleep's time runs on while the process is stopped, so
    # its length would depend on whether the stop came before or during it
    slow = "import time as _t\n_t0 = _t.process_time()\nwhile _t.process_time() - _t0 < 1.0:\n    pass\n" + CORRECT
    key = _key()
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    ev.host_lock_key = key
    window = HostDeviceLock(key)
    # held longer than the build's whole limit (4 s)
    seen = _window_cuts_in(monkeypatch, window, lambda h, midstep: midstep, hold_s=5.0)
    try:
        res = evaluate(ev, slow, AFFINE, build_timeout_s=4.0)
        seen["thread"].join(10)  # type: ignore[attr-defined]
        assert res.outcome is Outcome.CORRECT, describe(res)
        assert res.phase_s.get("midstep_yields", 0) >= 1 and res.phase_s["yield_wait"] >= 4.5, res.phase_s
        # the build's own time (its 1 s sleep and the import) apart from the 5 s it was stopped for the window
        assert res.phase_s["build_stopped"] >= 4.5 and 0.9 <= res.phase_s["build"] < 4.5, res.phase_s
    finally:
        window.release()
        ev.close()


@pytest.mark.parametrize("off_hold", [True, False])
def test_a_window_goes_on_beside_a_candidates_process_start_only_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, off_hold: bool) -> None:
    """``KBENCH_START_OFF_HOLD=1``: the candidate's process starts with the slot's hold given up, so a window
    queued during the start takes the lock at once; the candidate's code (its module imported) runs only once
    the window is over and the hold is back. Unset: the start holds the lock (the window waits for it)."""
    from execution.test_reference_budget import CORRECT

    stamp = tmp_path / "imported_at"
    source = f"import time as _t\nopen({str(stamp)!r}, 'w').write(repr(_t.time()))\n" + CORRECT
    if off_hold:
        monkeypatch.setenv("KBENCH_START_OFF_HOLD", "1")
    else:
        monkeypatch.delenv("KBENCH_START_OFF_HOLD", raising=False)
    key = _key()
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    ev.host_lock_key = key
    assert ev.start_off_hold is off_hold
    window = HostDeviceLock(key)
    seen: dict = {}
    start = ev.launcher.start

    def start_then_window(*a, **k):  # noqa: ANN002, ANN003, ANN202
        h = start(*a, **k)
        # another slot's window, asked for while this candidate's process is starting
        try:
            seen["wait"] = window.acquire(timeout_s=0.5 if not off_hold else 5.0)
        except TimeoutError:
            seen["refused"] = True
            return h
        time.sleep(2.0)  # the process says hello meanwhile (well under 2 s on the CPU)
        seen["window_end"] = time.time()
        window.release()
        return h

    monkeypatch.setattr(ev.launcher, "start", start_then_window)
    try:
        res = evaluate(ev, source, AFFINE)
        assert res.outcome is Outcome.CORRECT, describe(res)
        if off_hold:
            assert seen["wait"] < 0.5, seen
            imported_at = float(stamp.read_text())
            assert imported_at >= seen["window_end"], "the candidate's code ran during another slot's window"
            assert res.phase_s["slot_start"] >= 2.0, res.phase_s  # the start's time includes the window
            steps = {name: (a, b) for name, a, b in res.extra["steps"]}
            assert list(steps)[:8] == ["setup_claim", "reference", "plan_memory", "share_sets", "start",
                                       "build_construct", "first_call", "correctness"]
            assert all(a <= b for a, b in steps.values())
            assert all(b[1] >= a[2] for a, b in zip(res.extra["steps"], res.extra["steps"][1:]))  # in order
            assert steps["start"][1] - steps["start"][0] >= 2.0 and steps["start"][1] <= imported_at
        else:
            assert seen.get("refused"), f"a window got the device during the start: {seen}"
    finally:
        ev.close()


def test_a_bad_start_off_hold_switch_names_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KBENCH_START_OFF_HOLD", "maybe")
    with pytest.raises(ValueError, match="KBENCH_START_OFF_HOLD"):
        DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)


def test_every_path_stores_the_candidates_steps(tmp_path: Path) -> None:
    """A candidate that fails to build, or runs out of time building, stores the steps it got through and the rest
    until it ended (a build that ran long is what a drain most likely waited for), back to back."""
    from execution.test_reference_budget import CORRECT

    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    try:
        broken = evaluate(ev, "def broken(:\n")
        slow = evaluate(ev, "import time as _t\n_t.sleep(30)\n" + CORRECT, build_timeout_s=2.0)
        fine = evaluate(ev, CORRECT)
        assert broken.outcome is Outcome.COMPILE_ERROR and slow.outcome is Outcome.TIMEOUT, (describe(broken), describe(slow))
        for res in (broken, slow):
            names = [s[0] for s in res.extra["steps"]]
            assert names == ["setup_claim", "reference", "plan_memory", "share_sets", "start", "ended"], names
        # the build that timed out (2 s; on a loaded machine the process starts late: 1.86 s seen)
        assert slow.extra["steps"][-1][2] - slow.extra["steps"][-1][1] >= 1.5
        names = [s[0] for s in fine.extra["steps"]]
        assert names[:6] == ["setup_claim", "reference", "plan_memory", "share_sets", "start", "build_construct"]
        assert names[-1] in ("finish", "baselines") and "ended" not in names
        for res in (broken, slow, fine):
            st = res.extra["steps"]
            assert all(b[1] >= a[2] - 1e-3 for a, b in zip(st, st[1:])), st
    finally:
        ev.close()


def test_the_reference_phase_is_this_jobs_own_set_up(tmp_path: Path) -> None:
    """A context kept from an earlier job of the same problem costs the next job nothing: its ``reference``
    phase is not the earlier job's set-up time again (summed over a run's jobs, that counted one set-up many
    times)."""
    import dataclasses

    from execution.evalkit import AFFINE
    from execution.test_reference_budget import CORRECT

    slow = dataclasses.replace(AFFINE, code=AFFINE.code.replace("        self.alpha = alpha\n",
                                                                "        self.alpha = alpha\n"
                                                                "        import time; time.sleep(0.8)\n"),
                               code_sha256="")
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    try:
        first, second = evaluate(ev, CORRECT, slow), evaluate(ev, CORRECT, slow)
        assert first.outcome is Outcome.CORRECT and second.outcome is Outcome.CORRECT, describe(second)
        assert first.phase_s["reference"] >= 0.8, first.phase_s
        assert second.phase_s["reference"] < 0.3, second.phase_s  # the context was kept
    finally:
        ev.close()


@pytest.mark.parametrize("notices", [True, False])
def test_a_window_goes_on_beside_a_compile_announced_inside_the_first_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, notices: bool) -> None:
    """A candidate's first call compiles its Triton kernels (host work, 0.6-1.1 s on an H200's host): the
    process announces the compile (``worker.host_work``, from the Triton compile hooks the worker installs;
    Triton's interpreter compiles nothing, so here the candidate calls the hooks around a 1.5 s sleep), and a window another slot queues meanwhile gets
    the device with the process stopped mid-call, instead of waiting for the call to end. With
    ``KBENCH_COMPILE_OFF_HOLD=0`` the notices are not sent and the window waits for the whole call."""
    from execution.test_reference_budget import CORRECT

    stamp = tmp_path / "compiling"
    source = CORRECT + f'''

import time as _t
from triton import knobs as _knobs
_Base = ModelNew


class ModelNew(_Base):
    def forward(self, *args):
        if not getattr(self, "_compiled", False):
            self._compiled = True
            # (no hooks where the worker was asked for no notices)
            _knobs.runtime.jit_cache_hook and _knobs.runtime.jit_cache_hook(key="k", fn=None, compile={{}})
            open({str(stamp)!r}, "w").close()
            _t.sleep(1.5)
            _knobs.runtime.jit_post_compile_hook and _knobs.runtime.jit_post_compile_hook(key="k", fn=None,
                                                                                            compile={{}})
        return super().forward(*args)
'''
    monkeypatch.setenv("KBENCH_COMPILE_OFF_HOLD", "1" if notices else "0")
    key = _key()
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    ev.host_lock_key = key
    assert ev.compile_off_hold is notices
    window = HostDeviceLock(key)
    seen: dict = {}

    def other_slot() -> None:
        if not _wait_until(stamp.exists, 60.0):
            return
        seen["wait"] = window.acquire(timeout_s=10.0)
        try:
            seen["state"] = Path(f"/proc/{seen['pid']}/stat").read_text().split(") ")[1][0] if "pid" in seen else "?"
            time.sleep(0.1)
        finally:
            window.release()

    start = ev.launcher.start

    def start_and_note(*a, **k):  # noqa: ANN002, ANN003, ANN202
        h = start(*a, **k)
        seen["pid"] = h.pid
        return h

    monkeypatch.setattr(ev.launcher, "start", start_and_note)
    t = threading.Thread(target=other_slot)
    t.start()
    try:
        res = evaluate(ev, source, AFFINE)
        t.join(15)
        assert not t.is_alive()
        assert res.outcome is Outcome.CORRECT, describe(res)
        if notices:
            assert seen["wait"] < 0.5, f"the window waited {seen['wait']:.2f} s for the announced compile"
            assert seen["state"] == "T", seen  # the candidate's process was stopped mid-call meanwhile
            assert res.phase_s["host_work_notices"] == 1.0 and res.phase_s.get("midstep_yields", 0) >= 1, res.phase_s
            # the call's own time apart from the time it was stopped for the window
            assert res.phase_s["trial_call_first_stopped"] >= 0.09, res.phase_s
            # a sleep runs on while the process is stopped: the compile's own time and its time stopped add up to it
            compiled = res.phase_s["jit_compile"] + res.phase_s["jit_compile_stopped"]
            assert 1.45 <= compiled < 2.5 and res.phase_s["jit_compiles"] == 1.0, res.phase_s
        else:
            assert seen["wait"] >= 1.0, f"a window got the device during the call: {seen}"
            assert "host_work_notices" not in res.phase_s and "jit_compile" not in res.phase_s, res.phase_s
    finally:
        ev.close()


def test_announced_host_work_is_not_honoured_inside_the_candidates_own_timing(tmp_path: Path) -> None:
    """A notice sent while the candidate times itself (it holds the window) changes nothing: the trusted side
    reads it and goes on waiting for the timing; no yield happens inside a window."""
    from execution.test_reference_budget import CORRECT

    source = CORRECT + '''

from triton import knobs as _knobs
_Base = ModelNew


class ModelNew(_Base):
    def forward(self, *args):
        _knobs.runtime.jit_cache_hook(key="k", fn=None, compile={})
        _knobs.runtime.jit_post_compile_hook(key="k", fn=None, compile={})
        return super().forward(*args)
'''
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    ev.host_lock_key = _key()
    try:
        res = evaluate(ev, source, AFFINE)
        assert res.outcome is Outcome.CORRECT, describe(res)
        # honoured in the correctness calls and the precision watch's call only; those of the timed calls, the
        # ablation and the re-checks were read and dropped
        honoured = FAST_KBENCH.correct_trials + 1
        assert res.phase_s["host_work_notices"] == honoured, res.phase_s
        assert res.phase_s["jit_compiles"] > honoured + 5, res.phase_s
    finally:
        ev.close()


def test_the_candidate_cannot_overwrite_the_trusted_sides_step_times(tmp_path: Path) -> None:
    """The process's ``phase_s`` (sent with "done") carries its own steps; a candidate that writes into it cannot
    replace the trusted side's figures (the sweep's analyses read ``yield_wait``, ``reference``, ``slot_*``)."""
    from execution.test_reference_budget import CORRECT

    source = CORRECT + '''

import sys as _sys
_Base = ModelNew


class ModelNew(_Base):
    def forward(self, *args):
        f = _sys._getframe(1)
        while f is not None:
            job = f.f_locals.get("self")
            if isinstance(getattr(job, "phase_s", None), dict):
                job.phase_s.update({"yield_wait": 999.0, "reference": 999.0, "slot_start": 999.0, "build": 999.0})
                break
            f = f.f_back
        return super().forward(*args)
'''
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    try:
        res = evaluate(ev, source, AFFINE)
        assert res.outcome is Outcome.CHEAT, describe(res)  # its frame walk is found too; the run goes on
        assert all(res.phase_s.get(k, 0.0) < 999.0 for k in ("yield_wait", "reference", "slot_start", "build")), \
            res.phase_s
        assert res.phase_s["trial_call"] > 0.0  # the process's own steps still arrive
    finally:
        ev.close()


def _lane_job(ev: DeviceEvaluator, steps: list[list[float]], host: list[list[float]], n_gpu: int = 6,
              step_s: float = 0.1, host_s: float = 0.6) -> None:
    """A large job as the lane runs it: GPU steps (giving way between them when a window is queued), a
    stretch of host work (its shared hold given up), GPU steps again."""
    with ev._gpu_work():
        ev._lane_job = ev.lane_priority  # as evaluate() sets it for a large job
        ev._set_lane(True)
        try:
            for part in range(2):
                for _ in range(n_gpu):
                    t0 = time.time()
                    time.sleep(step_s)
                    steps.append([t0, time.time()])
                    ev._gpu_yield(None)
                if part == 0:
                    with ev._host_stretch():
                        t0 = time.time()
                        time.sleep(host_s)
                        host.append([t0, time.time()])
        finally:
            ev._set_lane(False)
            ev._lane_job = False


@pytest.mark.parametrize("priority", [True, False])
def test_with_lane_priority_a_window_waits_for_the_large_jobs_host_work(tmp_path: Path, priority: bool) -> None:
    """KBENCH_LANE_PRIORITY: another slot's window asked for while the lane's large job computes is queued only
    when that job gives its hold up (here its host stretch), and runs beside its host work; the large job does not
    stop for it. Without the switch the window cuts in at the large job's next step, as before."""
    key = _key()
    run_lock = threading.Lock()
    flags = [0, 0]
    evs = [DeviceEvaluator("cpu", scratch_dir=tmp_path / f"s{i}", sandbox=False, timing_lock=run_lock,
                           window_queue=(flags, i)) for i in range(2)]
    for ev in evs:
        ev.host_lock_key = key
        ev.lane_priority = priority
    steps: list[list[float]] = []
    host: list[list[float]] = []
    try:
        t = threading.Thread(target=_lane_job, args=(evs[0], steps, host))
        t.start()
        assert _wait_until(lambda: len(steps) >= 1)
        with evs[1]._gpu_work():
            with evs[1].timing_window("candidate") as w:
                time.sleep(0.2)
        t.join(20)
        assert not t.is_alive()
        for s in steps:  # never inside the window, either way
            assert not (s[0] < w["end"] and w["start"] < s[1]), (s, w)
        gpu_before = [s for s in steps if s[1] <= host[0][0]]
        if priority:
            assert len(gpu_before) == 6, "the large job stopped for the window before its host work"
            assert host[0][0] <= w["start"] and w["end"] <= host[0][1] + 0.05, (w, host)  # beside its host work
            assert w["lane_wait_s"] > 0.3
        else:
            assert w["start"] < host[0][0] and "lane_wait_s" not in w  # it cut in at the next step
        assert flags == [0, 0]
    finally:
        for ev in evs:
            ev.close()


def test_a_window_waits_for_the_lane_at_most_its_limit(tmp_path: Path) -> None:
    """A lane bit left set (a slot stuck computing) holds another slot's window back only LANE_WAIT_MAX_S."""
    flags = [DeviceEvaluator.LANE_BIT, 0]
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "s", sandbox=False, window_queue=(flags, 1))
    try:
        ev.lane_priority = True
        ev.LANE_WAIT_MAX_S = 0.3
        with ev.timing_window("candidate") as w:
            pass
        assert 0.25 < w["lane_wait_s"] < 2.0
        assert flags == [DeviceEvaluator.LANE_BIT, 0]  # its own flag cleared, the other slot's untouched
        ev.lane_priority = False
        with ev.timing_window("candidate") as w:
            pass
        assert "lane_wait_s" not in w  # off: no wait
    finally:
        ev.close()
