"""The memory ledger of slots sharing one GPU: a job's plans are sized by the problem with the planner's
own functions, a large job is granted its best plan or its least shared one as the small ones leave
room, waits (with a turnstile) when there is none, falls back to the fixed 1/N share when the wait runs
out, a dead slot's claim is cleared, and the ledger's lock goes with a holder that dies."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from types import SimpleNamespace

import pytest

from kernelbench_harness.execution.device import TIMING_SETS_FRACTION, DeviceEvaluator, share_plan, timing_set_count
from kernelbench_harness.execution.memledger import (UTIL, MemoryLedger, clear_slot, job_share, memory_need,
                                                     new_state)

GIB = 1 << 30
H200 = int(139.8 * GIB)


def _ctx(set_gib: float, out_gib: float, *, lazy: bool = True, refs_gib: float = 0.0) -> SimpleNamespace:
    """What DeviceEvaluator._planner reads of a ProblemContext (kbench: 5 correctness sets + 1, rotate 3)."""
    return SimpleNamespace(n_sets=6, share_set_nbytes=int(set_gib * GIB), share_places=[{}],
                           out_nbytes=int(out_gib * GIB), lazy_refs=lazy, ref_estimate_bytes=int(refs_gib * GIB),
                           protocol=SimpleNamespace(rotate_inputs=3), n_correct=5, memory_share=1.0,
                           fp64_judge=True)


def _slot(share: float = 1 / 6, ledger=None, share_ok=None) -> SimpleNamespace:
    import torch

    slot = SimpleNamespace(memory_share=share, memory_ledger=ledger, device=torch.device("cuda:0"), _gpu_share=None,
                           SHARE_MAX_FRACTION=DeviceEvaluator.SHARE_MAX_FRACTION, MEMORY_WAIT_MAX_S=10.0,
                           _share_ok=share_ok, _take_shared=lambda lk, deadline=None: None, _alone=False, _job_claim=0.0,
                           _share_out_nbytes=DeviceEvaluator._share_out_nbytes,
                           work_nbytes=DeviceEvaluator.work_nbytes, weights_nbytes=DeviceEvaluator.weights_nbytes,
                           PHYSICAL_WAIT_MAX_S=10.0, PHYSICAL_POLL_S=0.01,
                           window_queue=None, lane_priority=False, lane_exclusive=False, _lane_job=False,
                           _host_off=False)
    slot._set_lane = lambda on: DeviceEvaluator._set_lane(slot, on)
    slot._lane_busy = lambda: DeviceEvaluator._lane_busy(slot)
    slot._others_flagged = lambda bit: DeviceEvaluator._others_flagged(slot, bit)
    slot._lane_holds_device = lambda: DeviceEvaluator._lane_holds_device(slot)
    slot._planner = lambda ctx, total, baselines=False: DeviceEvaluator._planner(slot, ctx, total, baselines)
    slot._wait_device_free = lambda need, give, wait: DeviceEvaluator._wait_device_free(slot, need, give, wait)
    slot._lock_given_up_while_waiting = lambda: DeviceEvaluator._lock_given_up_while_waiting(slot)
    slot._retake_shared = lambda lk, deadline=None: DeviceEvaluator._retake_shared(slot, lk, deadline)
    slot._claim_device_alone = lambda phase: DeviceEvaluator._claim_device_alone(slot, phase)
    slot._claim_and_wait = lambda claim, need, phase, keep_reserve=False: DeviceEvaluator._claim_and_wait(
        slot, claim, need, phase, keep_reserve)
    slot._alone_verdict = lambda first, res: DeviceEvaluator._alone_verdict(slot, first, res)
    slot._alone_fell = False
    return slot


def _need(ctx, share_ok=None):
    plan_at = _slot(share_ok=share_ok)._planner(ctx, H200)
    return memory_need(plan_at, H200), plan_at


def _pretend_cuda(monkeypatch) -> None:
    """An idle H200 as torch.cuda reports it to the slot's memory code (this machine has no GPU)."""
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=H200))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: (H200, H200))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: 0)


def _ledgers(n: int, tmp_path) -> list[MemoryLedger]:
    claims, pending, path = new_state(mp.get_context("spawn"), n, str(tmp_path / "ledger.lock"))
    return [MemoryLedger(claims, pending, path, i) for i in range(n)]


def test_a_small_problems_best_plan_fits_in_the_fixed_share_and_claims_a_sliver():
    need, plan_at = _need(_ctx(0.01, 0.01))
    assert need.high_plan.exchange == "all" and need.high_plan.timing_sets == 3
    assert need.high_share < 1 / 6 and need.high_claim < 0.01
    assert plan_at(1 / 6) == need.high_plan  # the plan at the fixed share is the best one


#: current KernelBench L1/19-32: 6 GiB input sets and outputs on an H200 (139.8 GiB)
BIG = (6.0, 6.0)


def test_a_large_level1_problems_shares_are_the_planners_own_thresholds():
    need, plan_at = _need(_ctx(*BIG))
    best = need.high_plan
    assert best.exchange == "all"  # six 6 GiB sets and the output: 42 of 48.9 GiB
    assert plan_at(1.0).rank >= best.rank  # the whole device's plan has more timing sets than fit within UTIL
    # the smallest share with the best plan, not the whole device (the planner's rounding included)
    assert plan_at(need.high_share) == best and plan_at(need.high_share * 0.999).rank < best.rank
    assert need.high_share < 1.0
    # the least shared plan: one staged set, one timing set; just below its share, files
    assert need.low_plan.exchange == "staged" and need.low_plan.timing_sets == 1
    assert plan_at(need.low_share * 0.999).exchange == "files"
    assert need.low_share > 1 / 6  # with six slots the fixed share sends the sets through files
    # each claim is the bytes its plan sets aside over UTIL of the device, timing copies included
    assert need.low_claim == pytest.approx(need.low_plan.nbytes / (UTIL * H200))
    assert need.low_plan.nbytes >= 6 * GIB + 6 * GIB + 3 * 6 * GIB


def test_a_16gib_reduction_claims_its_judging_beside_the_candidates_own_copy():
    # L1/45 (16 GiB input sets, a 142 MB output): H200 session 13's one harness error, the trusted side out
    # of memory upcasting the set while the candidate's process held three copies of it. The set is staged
    # (too large to share all six); the judging (the set drawn again and its float64 upcast) is the larger
    # turn, beside the candidate's process's own copy of the set
    ctx = _ctx(16.0, 0.14)
    need, plan_at = _need(ctx)
    assert need.high_plan.exchange == need.low_plan.exchange == "staged"
    work = DeviceEvaluator.work_nbytes(16 * GIB, ctx.out_nbytes, True, own_copies=1)
    trusted = ctx.out_nbytes + 16 * GIB + 2 * 16 * GIB  # the output copied out; the set and its upcast
    # beside the judging: the candidate's own copy of the set and, after timing, its timing buffer
    assert work == trusted + 2 * 16 * GIB > (3 * 16 * GIB + 2 * ctx.out_nbytes)  # the judging's turn is larger
    assert need.high_plan.nbytes == 16 * GIB + DeviceEvaluator._share_out_nbytes(ctx) + work
    assert need.high_plan.nbytes <= UTIL * H200 and need.high_claim > 0.8  # alone on the device, as it must be


def test_sets_too_large_to_share_still_claim_their_timing_copies():
    need, plan_at = _need(_ctx(40.0, 40.0))  # one set plus the output over 35% of the device
    assert need.high_plan.exchange == "files" and need.low_plan == need.high_plan
    assert need.high_claim == 1.0  # three 40 GiB copies: alone on the device
    # sharing switched off (or unavailable): no shared buffers are claimed, only the copies
    off, _ = _need(_ctx(6.0, 6.0), share_ok=False)
    assert off.high_plan.exchange == "files"
    work = DeviceEvaluator.work_nbytes(6 * GIB, 6 * GIB, True)
    assert off.high_plan.nbytes == max((2 * off.high_plan.timing_sets + 1) * 6 * GIB, work)
    with pytest.raises(ValueError):
        memory_need(plan_at, 0)


def test_stored_references_are_part_of_every_plan():
    lazy, _ = _need(_ctx(0.5, 0.5))
    stored, _ = _need(_ctx(0.5, 0.5, lazy=False, refs_gib=3.0))
    assert stored.high_plan.nbytes == lazy.high_plan.nbytes + 3 * GIB


def test_a_large_job_gets_its_least_shared_plan_beside_small_ones_and_a_second_waits(tmp_path):
    slots = _ledgers(6, tmp_path)
    small, _ = _need(_ctx(0.01, 0.01))
    for led in slots[:4]:  # four small jobs: each plans for 1/6 and claims the floor
        share, claim, waited = job_share(led, small, 1 / 6, small.high_plan, wait_s=1.0)
        assert share == pytest.approx(1 / 6) and claim == pytest.approx(MemoryLedger.FLOOR) and waited == 0.0
    big, plan_at = _need(_ctx(6.5, 6.5))
    # its best plan (every set shared) with its judging needs nearly the whole device (H200 session 12: a
    # trusted process of a 6 GiB one held 71 GiB); beside the small ones it gets the staged plan
    assert big.high_claim > 1.0 - 4 * MemoryLedger.FLOOR > big.low_claim
    share, claim, waited = job_share(slots[4], big, 1 / 6, plan_at(1 / 6), wait_s=1.0)
    assert share == big.low_share and claim == big.low_claim and waited == 0.0
    assert plan_at(share).exchange == "staged"  # through shared memory instead of files
    # a second large job: no room for either of its plans now; it becomes the one waiting
    assert slots[5].try_claim([big.high_claim, big.low_claim]) is None
    assert int(slots[5].pending[0]) == 5
    # a small job starts beside it only where the waiting claim still fits
    slots[0].release()
    free_after = 1.0 - sum(slots[0].claims[:]) - big.low_claim
    got = slots[0].try_claim([MemoryLedger.FLOOR])
    assert (got is not None) == (free_after >= MemoryLedger.FLOOR - 1e-9)
    if got is not None:
        slots[0].release()
    # once the first large job is done the waiting one is granted, and the turnstile opens
    slots[4].release()
    got = slots[5].try_claim([big.high_claim, big.low_claim])
    assert got == big.low_claim and int(slots[5].pending[0]) == -1
    assert sum(slots[0].claims[:]) <= MemoryLedger.CAPACITY + 1e-9
    # alone on the device it gets its best plan
    for led in slots[1:4]:
        led.release()
    slots[5].release()
    assert slots[5].try_claim([big.high_claim, big.low_claim]) == big.high_claim


def test_a_lane_job_claims_its_least_shared_plan_even_where_its_best_would_fit(tmp_path):
    """A job of the lane (6 GiB sets and outputs: its best plan, every set shared and two timing sets, now
    fits the device) takes its least shared plan, so the other slots keep the rest; outside the lane it
    takes its best where there is room, and a lean job whose plans are one plan is granted it."""
    a, b = _ledgers(2, tmp_path)
    big, plan_at = _need(_ctx(*BIG))
    assert big.high_plan.exchange == "all" and big.high_claim <= 1.0 - MemoryLedger.FLOOR
    assert big.low_plan.exchange == "staged" and big.low_claim < big.high_claim
    assert job_share(a, big, 1 / 2, plan_at(1 / 2), wait_s=1.0) == (big.high_share, big.high_claim, 0.0)
    a.release()
    a.lane = True
    assert job_share(a, big, 1 / 2, plan_at(1 / 2), wait_s=1.0, lean=True) == (big.low_share, big.low_claim, 0.0)
    assert 1.0 - sum(a.claims[:]) > 1.0 - big.high_claim  # what the other slot is left
    a.lane = False
    a.release()
    huge, huge_at = _need(_ctx(20.0, 20.0))  # nothing but its least plan fits: the same either way
    assert job_share(b, huge, 1 / 2, huge_at(1 / 2), wait_s=1.0, lean=True)[1] == huge.low_claim


def test_a_claim_counts_the_judging_or_the_timing_copies_whichever_is_larger():
    slot = _slot()
    # output-heavy: judging (the outputs and their float64 upcasts) outweighs three timing copies
    ctx = _ctx(1.0, 4.0)
    plan = slot._planner(ctx, H200)(1.0)
    assert plan.exchange == "all"  # the sets are mapped: the candidate's process has no copy of its own
    set_nb, out_nb = ctx.share_set_nbytes, DeviceEvaluator._share_out_nbytes(ctx)
    work = DeviceEvaluator.work_nbytes(set_nb, ctx.out_nbytes, True, own_copies=0)
    assert work > (2 * plan.timing_sets + 1) * set_nb
    assert plan.nbytes == 6 * set_nb + out_nb + work
    # a reduction (small output) without a float64 judge: the timing copies are the larger
    ctx = _ctx(1.0, 0.001)
    ctx.fp64_judge = False
    plan = slot._planner(ctx, H200)(1.0)
    assert DeviceEvaluator.work_nbytes(ctx.share_set_nbytes, ctx.out_nbytes, False, own_copies=0) \
        < 7 * ctx.share_set_nbytes
    assert plan.nbytes == 6 * ctx.share_set_nbytes + DeviceEvaluator._share_out_nbytes(ctx) \
        + (2 * plan.timing_sets + 1) * ctx.share_set_nbytes
    # the float64 judge's upcasts are counted only with it
    mib64 = 64 << 20  # (a small job: the two sides' memory summed; test_memory_accounting has the large case)
    assert DeviceEvaluator.work_nbytes(mib64, mib64, True) - DeviceEvaluator.work_nbytes(mib64, mib64, False) \
        == 4 * mib64


def test_the_least_shared_plan_when_only_it_fits(tmp_path):
    a, b = _ledgers(2, tmp_path)
    big, plan_at = _need(_ctx(*BIG))
    a.claim([1.0 - big.low_claim], wait_s=0.1, fallback=0.0)
    share, claim, _ = job_share(b, big, 0.1, plan_at(0.1), wait_s=1.0)  # 1/10: files, worse than low
    assert claim == big.low_claim and share == big.low_share


def test_the_fixed_shares_plan_is_offered_when_it_beats_the_least_shared_one(tmp_path):
    # 2 GiB sets, three slots: at 1/3 every set is shared with two timing sets; the least shared plan is
    # one staged set and one timing set. Under contention the job must not get less than 1/N gave it.
    a, b = _ledgers(2, tmp_path)
    need, plan_at = _need(_ctx(2.0, 0.1))  # a reduction-like output: the timing copies dominate the claims
    fixed = plan_at(1 / 3)
    assert fixed.rank > need.low_plan.rank and need.high_share > 1 / 3
    a.claim([1.0 - need.claim_of(fixed)], wait_s=0.1, fallback=0.0)  # room for the fixed plan, not the best
    share, claim, _ = job_share(b, need, 1 / 3, fixed, wait_s=1.0)
    assert share == pytest.approx(1 / 3) and claim == need.claim_of(fixed)


def test_a_job_that_times_baselines_claims_their_copies_too():
    slot = _slot()
    ctx = _ctx(6.0, 6.0)
    plain = slot._planner(ctx, H200)(1.0)
    cold = DeviceEvaluator._planner(slot, ctx, H200, baselines=True)(1.0)
    assert cold.nbytes == plain.nbytes + plain.timing_sets * 6 * GIB + 6 * GIB


def test_a_waiting_job_gives_its_lock_up_once_and_is_granted_when_another_finishes(tmp_path):
    a, b = _ledgers(2, tmp_path)
    assert a.claim([0.8], wait_s=1.0, fallback=0.5)[0] == pytest.approx(0.8)
    calls: list[float] = []
    threading.Timer(0.3, a.release).start()
    claim, waited, fell = b.claim([0.9, 0.5], wait_s=10.0, fallback=0.5,
                                  on_wait=lambda: calls.append(time.monotonic()))
    assert not fell and claim == pytest.approx(0.9) and 0.2 < waited < 5.0
    assert len(calls) == 1  # the caller gave the device's lock up once, before the first wait


def test_a_wait_that_runs_out_plans_for_the_fixed_share(tmp_path):
    a, b, c = _ledgers(3, tmp_path)
    a.claim([0.9], wait_s=0.1, fallback=0.9)
    claim, waited, fell = b.claim([1.0, 0.5], wait_s=0.2, fallback=0.3)
    assert fell and claim == pytest.approx(0.3) and waited >= 0.2
    assert int(b.pending[0]) == -1  # its wait is over: others claim freely again
    b.release()
    big, plan_at = _need(_ctx(6.0, 6.0))
    share, claim, _ = job_share(c, big, 1 / 3, plan_at(1 / 3), wait_s=0.1)
    assert share == pytest.approx(1 / 3) and claim == pytest.approx(big.claim_of(plan_at(1 / 3)))


def test_a_dead_slots_claim_and_wait_are_cleared(tmp_path):
    a, b = _ledgers(2, tmp_path)
    a.claim([0.7], wait_s=0.1, fallback=0.7)
    assert b.try_claim([0.5]) is None and int(b.pending[0]) == 1
    clear_slot(b.claims, b.pending, 1)
    clear_slot(a.claims, a.pending, 0)
    assert list(a.claims[:]) == [0.0, 0.0] and int(a.pending[0]) == -1
    assert b.try_claim([0.5]) == pytest.approx(0.5)


def _claim_in_child(claims, pending, path, index, share):  # runs in a spawned process
    MemoryLedger(claims, pending, path, index).claim([share], wait_s=1.0, fallback=share)


def _hold_lock_and_die(path):  # runs in a spawned process: killed while holding the ledger's lock
    led = MemoryLedger([0.0], [-1.0, 0.0], path, 0)
    led.lock.acquire()
    os._exit(0)


def test_claims_are_seen_across_processes_and_the_lock_goes_with_a_dead_holder(tmp_path):
    ctx = mp.get_context("spawn")
    claims, pending, path = new_state(ctx, 2, str(tmp_path / "ledger.lock"))
    p = ctx.Process(target=_claim_in_child, args=(claims, pending, path, 1, 0.6))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    here = MemoryLedger(claims, pending, path, 0)
    assert here.others() == pytest.approx(0.6)
    assert here.try_claim([0.5]) is None  # 0.4 left
    q = ctx.Process(target=_hold_lock_and_die, args=(path,))
    q.start()
    q.join(60)
    t0 = time.monotonic()
    assert here.lock.acquire(timeout=2.0)  # an flock: released by the kernel when its holder died
    here.lock.release()
    assert time.monotonic() - t0 < 1.0


def test_a_slot_plans_its_job_for_the_granted_share_and_gives_the_host_lock_up_while_it_waits(monkeypatch,
                                                                                              tmp_path):
    """DeviceEvaluator._plan_memory on a (pretend) CUDA device: the share it plans for, the lock it gives
    up while waiting for memory and takes back, the wait it records."""
    import torch

    from kernelbench_harness.execution import device as devmod

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=H200))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    a, b = _ledgers(2, tmp_path)
    events: list[str] = []
    slot = _slot(0.5, b)
    slot._gpu_share = SimpleNamespace(release=lambda: events.append("released"))
    slot._take_shared = lambda lk, deadline=None: events.append("taken back")
    ctx = _ctx(6.0, 6.0)
    a.claim([0.9], wait_s=0.1, fallback=0.9)  # the other slot holds most of the device
    threading.Timer(0.3, a.release).start()
    phase: dict[str, float] = {}
    devmod.DeviceEvaluator._plan_memory(slot, ctx, phase)
    assert events == ["released", "taken back"]
    assert phase["memory_wait"] > 0.2
    need, _ = _need(ctx)
    assert ctx.memory_share == slot._job_share == need.high_share and slot._job_claim == need.high_claim
    # the timing sets the context then gives are the best plan's
    assert timing_set_count(3, 5, ctx.share_set_nbytes, int(H200 * ctx.memory_share)) == need.high_plan.timing_sets
    # a small problem beside it: planned for the fixed share, claiming only the floor
    small = _ctx(0.001, 0.001)
    b.release()
    devmod.DeviceEvaluator._plan_memory(slot, small, {})
    assert small.memory_share == pytest.approx(0.5) and b.claims[1] == pytest.approx(MemoryLedger.FLOOR)
    assert share_plan(6, small.share_set_nbytes, 1 << 20, int(H200 * 0.5), DeviceEvaluator.SHARE_MAX_FRACTION) == "all"
    assert TIMING_SETS_FRACTION == 0.25  # UTIL's parts (see memledger.UTIL)


def test_the_local_executor_gives_slots_on_one_device_one_ledger(monkeypatch):
    from kernelbench_harness.executors import local

    made: list[tuple] = []

    class FakeSlot:
        def __init__(self, index, device, options, timing_lock, window_queue=None, slot_pids=None, ledger=None):
            made.append((index, device, ledger))
            self.index, self.device, self.fingerprint = index, device, {}
            self.proc = None

        def wait_ready(self):
            pass

        def stop(self):
            pass

    import asyncio

    monkeypatch.setattr(local, "_Slot", FakeSlot)
    saved = os.sched_getaffinity(0)
    try:
        ex = local.LocalExecutor(["cuda:0", "cuda:0", "cuda:1"], {"timing_cpus": 0})
    finally:
        os.sched_setaffinity(0, saved)  # no core plan with timing_cpus=0; restored all the same
    (i0, _, l0), (i1, _, l1), (_, _, l2) = made
    assert l0 is not None and l1 is not None and l2 is None  # one slot on cuda:1: no ledger
    assert l0[0] is l1[0] and l0[2] == l1[2] and (l0[3], l1[3]) == (0, 1)
    assert os.path.exists(l0[2])
    asyncio.run(ex.close())
    assert not os.path.exists(l0[2])  # the lock file goes with the executor
    made.clear()
    monkeypatch.setenv("KBENCH_MEMORY_LEDGER", "0")
    local.LocalExecutor(["cuda:0", "cuda:0"], {"timing_cpus": 0})
    assert all(led is None for _, _, led in made)
    monkeypatch.setenv("KBENCH_MEMORY_LEDGER", "maybe")
    from kernelbench_harness.errors import ConfigError
    from kernelbench_harness.runner import _check_environment

    with pytest.raises(ConfigError, match="KBENCH_MEMORY_LEDGER"):
        _check_environment()


def test_a_cuda_window_takes_the_host_lock_but_not_the_runs_multiprocessing_lock(tmp_path, monkeypatch):
    """A slot worker killed inside a window kept the run's multiprocessing lock held, stalling every other
    slot on the device at its next window; on a CUDA device the host lock (an flock, gone with a dead
    holder) alone serialises the windows. CPU slots (no host lock) still take the run's lock."""
    import tempfile

    from kernelbench_harness.execution import device as devmod
    from kernelbench_harness.execution.scratch import HostDeviceLock

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    taken: list[str] = []
    run_lock = SimpleNamespace(acquire=lambda: taken.append("run"), release=lambda: taken.append("run released"))
    slot = SimpleNamespace(timing_lock=run_lock, host_lock_key="gpu-test-uuid", physical_device="cuda:0",
                           quieter=None, _nvml_probe=lambda: None, _timer_place=lambda pid: None)
    other = HostDeviceLock("gpu-test-uuid")
    with devmod.DeviceEvaluator._timing_window(slot, "candidate") as window:
        with pytest.raises(TimeoutError):  # the window holds the host lock exclusively
            other.acquire(shared=True, timeout_s=0.2)
    assert taken == [] and window["end"] >= window["start"]
    other.acquire(shared=True, timeout_s=2.0)  # and gives it back
    other.release()
    cpu = SimpleNamespace(timing_lock=run_lock, host_lock_key=None, physical_device="cpu", quieter=None,
                          _nvml_probe=lambda: None, _timer_place=lambda pid: None)
    with devmod.DeviceEvaluator._timing_window(cpu, "candidate"):
        pass
    assert taken == ["run", "run released"]


def _oom_then_correct(slot, ctx, claim_alone: bool = False) -> list[tuple[bool, float]]:
    """Set ``slot._evaluate`` to plan ``ctx``'s memory (after claiming the whole device in a re-run alone, with
    ``claim_alone``) and report ``oom`` the first time, ``correct`` after; returns the list it appends each run's
    ``(alone, claim)`` to."""
    from kernelbench_harness.core import EvalResult, Outcome
    from kernelbench_harness.execution import device as devmod

    seen: list[tuple[bool, float]] = []

    def evaluate(job):
        if claim_alone and slot._alone:
            devmod.DeviceEvaluator._claim_device_alone(slot, {})
        devmod.DeviceEvaluator._plan_memory(slot, ctx, {})
        seen.append((slot._alone, slot._job_claim))
        if len(seen) == 1:
            return EvalResult(Outcome.OOM, error="CUDA out of memory", extra={"memory_claim": slot._job_claim})
        return EvalResult(Outcome.CORRECT, extra={"memory_claim": slot._job_claim})
    slot._evaluate = evaluate
    return seen


def test_an_oom_beside_other_slots_is_evaluated_again_with_the_whole_device(monkeypatch, tmp_path):
    """A candidate that ran out of device memory while other slots' jobs held some is evaluated once more
    claiming the whole device; its verdict is that run's, with the first one kept in ``extra``."""
    import contextlib

    import torch

    from kernelbench_harness.core import EvalResult, Outcome
    from kernelbench_harness.execution import device as devmod

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=H200))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    a, b = _ledgers(2, tmp_path)
    slot = _slot(0.5, b)
    slot._gpu_work = contextlib.nullcontext
    slot._give_memory_back = lambda free_contexts=False: devmod.DeviceEvaluator._give_memory_back(slot, free_contexts)
    ctx = _ctx(0.5, 0.5)
    seen = _oom_then_correct(slot, ctx)
    gave_back: list[bool] = []
    slot._give_memory_back = lambda free_contexts=False: (
        gave_back.append(free_contexts), devmod.DeviceEvaluator._give_memory_back(slot, free_contexts))
    res = devmod.DeviceEvaluator.evaluate(slot, SimpleNamespace(large=False))
    # the first run's claim goes back before the re-run (its context kept: the re-run uses it); the job's
    # end frees large contexts (H200 session 13: idle slots held 23 GiB outside every claim)
    assert gave_back == [False, True]
    assert res.outcome is Outcome.CORRECT and res.extra["rerun_alone"] is True
    assert res.extra["oom_beside_others"]["error"] == "CUDA out of memory"
    assert seen[0][0] is False and seen[1] == (True, 1.0)  # the re-run claimed the whole device
    assert list(b.claims[:]) == [0.0, 0.0] and slot._alone is False
    # a host memory limit (the candidate's own resident memory) is not run again
    slot._evaluate = lambda job: EvalResult(Outcome.OOM, error="resident memory over the limit")
    assert "rerun_alone" not in devmod.DeviceEvaluator.evaluate(slot, SimpleNamespace(large=False)).extra


def test_a_trusted_side_allocation_that_runs_out_is_a_harness_oom_not_a_protocol_violation(monkeypatch):
    """H200 session 12: copying a candidate's 6 GiB output out of the shared buffer ran out of memory beside
    five other slots' jobs and was recorded as a ``cheat`` (a bad output description)."""
    import torch

    from kernelbench_harness.execution import device as devmod

    slot = SimpleNamespace(device=torch.device("cuda:0"))
    emptied: list[int] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    calls: list[int] = []

    def oom_once():
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
        return "copied"
    assert devmod.DeviceEvaluator._trusted_copy(slot, oom_once, "copying") == "copied" and emptied == [1]

    class AcceleratorError(RuntimeError):  # what the driver's cudaErrorMemoryAllocation surfaces as
        pass

    def always(e):
        def fn():
            raise e
        return fn
    for err in (torch.OutOfMemoryError("CUDA out of memory"), AcceleratorError("CUDA error: out of memory")):
        with pytest.raises(devmod.ReferenceError_) as info:
            devmod.DeviceEvaluator._trusted_copy(slot, always(err), "copying the candidate's output")
        assert info.value.oom and "out of device memory copying the candidate's output" in str(info.value)
    # anything else is not the harness's memory: it goes on as before (a bad shape is the candidate's)
    with pytest.raises(ValueError):
        devmod.DeviceEvaluator._trusted_copy(slot, always(ValueError("shape")), "copying")
    assert not devmod._device_oom(AcceleratorError("CUDA error: an illegal memory access"))
    # a CUDA library that could not allocate its handle or workspace beside other slots' work is out of memory too:
    # the reference failing so is the harness's (tried again), not the problem's (reference-failed, scored apart)
    assert devmod._device_oom(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert devmod._device_oom(RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))
    assert not devmod._device_oom(RuntimeError("CUDA error: CUBLAS_STATUS_INVALID_VALUE"))


def test_a_job_waits_for_the_devices_memory_to_be_free_with_the_lock_given_up(monkeypatch, caplog):
    """The ledger bounds the slots' claims; memory outside it (the warm-up pool's compiles, buffers of a
    process that would not die, another run) is waited out before the job sets its buffers up."""
    import torch

    from kernelbench_harness.execution import device as devmod

    free = [10 * GIB, 10 * GIB, 50 * GIB]
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: (free.pop(0) if len(free) > 1 else free[0], H200))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    slot = _slot()
    given: list[int] = []
    waited = devmod.DeviceEvaluator._wait_device_free(slot, 40 * GIB, lambda: given.append(1), 5.0)
    assert waited > 0 and given == [1]
    # free at once: no wait, the lock kept
    given.clear()
    assert devmod.DeviceEvaluator._wait_device_free(slot, 40 * GIB, lambda: given.append(1), 5.0) == 0.0
    assert given == []
    # never free: goes on after the wait, saying so
    free[:] = [1 * GIB]
    with caplog.at_level("WARNING"):
        waited = devmod.DeviceEvaluator._wait_device_free(slot, 40 * GIB, lambda: given.append(1), 0.2)
    assert waited >= 0.2 and given == [1] and "going on" in caplog.text
    # on a CPU nothing is waited for
    slot.device = torch.device("cpu")
    assert devmod.DeviceEvaluator._wait_device_free(slot, 40 * GIB, lambda: given.append(1), 5.0) == 0.0


def test_a_trusted_side_oom_beside_other_slots_is_evaluated_again_with_the_device_claimed_first(monkeypatch,
                                                                                                  tmp_path):
    """The trusted side running out of device memory (setting the reference up, staging, judging) beside
    other slots' jobs is the harness's: the job is evaluated again with the whole device claimed before the
    reference is set up, and with its memory free."""
    import contextlib


    from kernelbench_harness.core import EvalResult, Outcome
    from kernelbench_harness.execution import device as devmod

    _pretend_cuda(monkeypatch)
    a, b = _ledgers(2, tmp_path)
    slot = _slot(0.5, b)
    slot._gpu_work = contextlib.nullcontext
    slot._give_memory_back = lambda free_contexts=False: devmod.DeviceEvaluator._give_memory_back(slot, free_contexts)
    seen: list[tuple[bool, float]] = []

    def evaluate(job):
        phase: dict[str, float] = {}
        if slot._alone:
            slot._claim_device_alone(phase)  # as _evaluate does before the reference is set up
        seen.append((slot._alone, b.claims[1]))
        if len(seen) == 1:
            return EvalResult(Outcome.RUNTIME_ERROR, error="reference failed: out of memory",
                              extra={"reference_error": True, "harness_error": True, "trusted_oom": True})
        return EvalResult(Outcome.CORRECT)
    slot._evaluate = evaluate
    a.claim([0.3], wait_s=0.1, fallback=0.3)  # the other slot's job, done shortly
    import threading

    threading.Timer(0.2, a.release).start()
    res = devmod.DeviceEvaluator.evaluate(slot, SimpleNamespace(large=False))
    assert res.outcome is Outcome.CORRECT and res.extra["rerun_alone"] is True
    assert seen == [(False, 0.0), (True, 1.0)]  # claimed the whole device once the other job was done
    assert list(b.claims[:]) == [0.0, 0.0] and slot._alone is False


def test_a_large_problem_claims_its_set_up_before_the_reference_is_set_up(monkeypatch, tmp_path):
    """The claim for setting a large problem's reference up is made before anything is drawn (its input
    sizes from meta tensors); a small problem, or one whose context is cached, claims nothing then."""

    from kernelbench_harness.core import Problem
    from kernelbench_harness.protocols import get_protocol

    _pretend_cuda(monkeypatch)
    code = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
            "def get_inputs():\n    return [torch.rand(4096, N)]\ndef get_init_inputs():\n    return []\n")
    big = Problem(1, 951, "Big_test", code.replace("N", "393216"))  # 6 GiB of float32
    small = Problem(1, 952, "Small_test", code.replace("N", "16"))
    a, b = _ledgers(2, tmp_path)
    slot = _slot(0.5, b)
    slot._contexts = {}
    slot._setup_peaks = {}
    slot.SETUP_CLAIM_MIN_BYTES = DeviceEvaluator.SETUP_CLAIM_MIN_BYTES
    protocol = get_protocol("kbench")
    phase: dict[str, float] = {}
    DeviceEvaluator._claim_for_setup(slot, big, protocol, 7, phase)
    want = DeviceEvaluator.work_nbytes(6 * GIB, 6 * GIB, True, own_copies=0) / (UTIL * H200)
    assert b.claims[1] == pytest.approx(want) and slot._job_claim == pytest.approx(want) and not phase
    b.release()
    DeviceEvaluator._claim_for_setup(slot, small, protocol, 7, phase)
    assert b.claims[1] == 0.0
    # a small input whose set-up took 40 GiB when this slot last set it up (an attention's temporaries)
    slot._setup_peaks[(small.code_sha256, protocol.fingerprint())] = 40 * GIB
    DeviceEvaluator._claim_for_setup(slot, small, protocol, 7, phase)
    assert b.claims[1] == pytest.approx(40 * GIB / (UTIL * H200))
    b.release()
    # another slot's job holds most of the device: the set-up waits for it
    a.claim([0.9], wait_s=0.1, fallback=0.9)
    threading.Timer(0.3, a.release).start()
    DeviceEvaluator._claim_for_setup(slot, big, protocol, 7, phase)
    assert phase["memory_wait"] > 0.2 and b.claims[1] == pytest.approx(want)
    b.release()
    # cached context: nothing to set up
    slot._contexts = {(big.code_sha256, protocol.fingerprint(), 7): object()}
    DeviceEvaluator._claim_for_setup(slot, big, protocol, 7, {})
    assert b.claims[1] == 0.0
    # small inputs, 1 GiB of weights (L3/2 holds 8): the reference on the device and its float64 twin
    mlp = Problem(1, 953, "Weights_test", code.replace("N", "16").replace(
        "def forward", "def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(16384, 16384)\n    def forward"))
    DeviceEvaluator._claim_for_setup(slot, mlp, protocol, 7, {})
    w = 16384 * 16384 * 4 + 16384 * 4
    assert b.claims[1] == pytest.approx(3 * w / (UTIL * H200))
    b.release()
    # judged with allclose (no float64 twin): the reference's weights alone
    DeviceEvaluator._claim_for_setup(slot, mlp, get_protocol("kernelbench"), 7, {})
    assert b.claims[1] == pytest.approx(w / (UTIL * H200))
    b.release()


def test_the_best_plan_is_the_best_whose_claim_fits_the_device():
    """H200 session 12: L1/24 (6 GiB sets and output, baselines timed) was given every set shared and two
    timing sets, a plan whose bytes were over the device's UTIL (claim capped at 1.0): 107 GiB used."""
    slot = _slot()
    # (6.5 GiB: since a large job's two forwards run on copies of their own, 6 GiB with every set shared fits)
    plan_at = slot._planner(_ctx(6.5, 6.5), H200, baselines=True)
    assert plan_at(1.0).nbytes > UTIL * H200  # every set shared: does not fit with its judging
    need = memory_need(plan_at, H200)
    assert need.high_plan.nbytes <= UTIL * H200 and need.high_claim <= 1.0
    assert need.high_plan.exchange == "staged" and plan_at(need.high_share) == need.high_plan
    # nothing fits: the least shared plan, claiming the whole device
    huge = memory_need(slot._planner(_ctx(20.0, 20.0), H200, baselines=True), H200)
    assert huge.low_claim == 1.0 and huge.high_plan.exchange != "files"


def test_a_jobs_set_up_claim_goes_back_before_it_waits_for_its_plans(monkeypatch, tmp_path):
    """No job holds memory while it waits for more: the set-up's claim is given back first."""
    import torch

    from kernelbench_harness.execution import device as devmod

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=H200))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    a, b = _ledgers(2, tmp_path)
    slot = _slot(0.5, b)
    ctx = _ctx(6.0, 6.0)
    need, _ = _need(ctx)
    b.claim([0.3], wait_s=0.1, fallback=0.3)  # its set-up claim
    slot._job_claim = 0.3
    a.claim([1.0 - need.low_claim + 0.05], wait_s=0.1, fallback=0.0)  # no room for either plan now
    held_while_waiting: list[float] = []
    threading.Timer(0.15, lambda: held_while_waiting.append(b.claims[1])).start()
    threading.Timer(0.3, a.release).start()
    phase: dict[str, float] = {}
    devmod.DeviceEvaluator._plan_memory(slot, ctx, phase)
    assert held_while_waiting == [0.0] and phase["memory_wait"] > 0.2
    assert b.claims[1] == slot._job_claim == need.high_claim


def test_an_alone_rerun_keeps_its_whole_device_claim_whoever_waits(monkeypatch, tmp_path):
    """Review of stop 20: a re-run that claimed the whole device before its set-up asked for it again in
    _plan_memory; another slot waiting at the turnstile made that fail for 300 s, then the re-run fell back
    to a shared plan beside the other. A claim no larger than what a slot holds is granted at once."""

    from kernelbench_harness.execution import device as devmod

    _pretend_cuda(monkeypatch)
    a, b = _ledgers(2, tmp_path)
    slot = _slot(0.5, b)
    slot._alone = True
    devmod.DeviceEvaluator._claim_device_alone(slot, {})
    assert b.claims[1] == 1.0
    assert a.try_claim([0.2]) is None and int(a.pending[0]) == 0  # the other slot now waits
    assert b.try_claim([1.0]) == 1.0 and b.try_claim([0.5]) == 0.5  # no more than held: granted at once
    b.claims[1] = 1.0
    t0 = time.monotonic()
    ctx = _ctx(0.5, 0.5)
    devmod.DeviceEvaluator._plan_memory(slot, ctx, {})
    assert time.monotonic() - t0 < 1.0 and slot._job_claim == 1.0 and ctx.memory_share == 1.0
    assert slot._alone_fell is False


def test_an_alone_reruns_oom_is_the_harnesss_if_others_held_memory_and_first_findings_are_kept():
    """A re-run with the whole device claimed: where another slot held a claim meanwhile, the candidate's
    ``oom`` in it is marked the harness's; the trusted side's out-of-memory stays the harness's; findings of
    the first run are kept."""
    from kernelbench_harness.core import EvalResult, Finding, Outcome, Severity
    from kernelbench_harness.execution import device as devmod

    class Ledger:
        held_by_others = 0.0

        def others(self):
            return self.held_by_others
    led = Ledger()
    slot = SimpleNamespace(memory_ledger=led, _alone_fell=False)
    cheat = Finding("runtime.threads", Severity.CHEAT, "deferred-work", "a thread is alive")
    first = EvalResult(Outcome.OOM, error="CUDA out of memory", findings=(cheat,), extra={"memory_claim": 0.3})
    oom = EvalResult(Outcome.OOM, error="CUDA out of memory")
    res = devmod.DeviceEvaluator._alone_verdict(slot, first, oom)
    assert res.outcome is Outcome.OOM and "harness_error" not in res.extra and cheat in res.findings
    assert res.extra["rerun_alone"] and res.extra["oom_beside_others"]["memory_claim"] == 0.3
    judged = EvalResult(Outcome.RUNTIME_ERROR, error="reference failed: out of device memory",
                        extra={"reference_error": True, "phase": "correctness", "harness_error": True,
                               "trusted_oom": True})
    res = devmod.DeviceEvaluator._alone_verdict(slot, first, judged)
    assert res.outcome is Outcome.RUNTIME_ERROR and res.extra["harness_error"]
    led.held_by_others = 0.2  # another slot held memory meanwhile (its wait ran out)
    res = devmod.DeviceEvaluator._alone_verdict(slot, first, oom)
    assert res.outcome is Outcome.OOM and res.extra["harness_error"] and res.extra["rerun_not_alone"]
    led.held_by_others = 0.0
    slot._alone_fell = True  # this one's own claim came after its wait ran out
    assert devmod.DeviceEvaluator._alone_verdict(slot, first, oom).extra["harness_error"]
    slot._alone_fell = False
    # alone, but the trusted process itself held half the device or more when the candidate ran out
    held = EvalResult(Outcome.OOM, error="CUDA out of memory",
                      extra={"trusted_memory": {"allocated_bytes": 52, "reserved_bytes": 60, "device_total_bytes": 100}})
    res = devmod.DeviceEvaluator._alone_verdict(slot, first, held)
    assert res.extra["harness_error"] and res.extra["trusted_held"] == 0.52
    low = held.with_(extra={"trusted_memory": {"allocated_bytes": 40, "reserved_bytes": 60, "device_total_bytes": 100}})
    assert "harness_error" not in devmod.DeviceEvaluator._alone_verdict(slot, first, low).extra
    host = held.with_(error="resident memory over the limit")  # the host's limit, not the device's memory
    assert "harness_error" not in devmod.DeviceEvaluator._alone_verdict(slot, first, host).extra


def test_outputs_describing_far_more_bytes_than_the_references_are_not_copied(tmp_path):
    """A candidate's outputs that describe many times the reference's bytes (dozens of descriptions of the
    whole shared buffer, say) would run the trusted side out of memory: they are judged wrong unread."""
    import torch

    from kernelbench_harness.execution import device as devmod
    from kernelbench_harness.execution.verify import compare_outputs

    slot = SimpleNamespace(_out_limit_bytes=4 * 4096, _share_out=None, device=torch.device("cpu"))
    slot._shared_output = lambda d: devmod.DeviceEvaluator._shared_output(slot, d)
    big = {"shared": True, "offset": 0, "dtype": "float32", "shape": [4096]}  # 16 KiB each
    outs = devmod.DeviceEvaluator._read_outputs(slot, {"descs": [big] * 5}, tmp_path)
    assert len(outs) == 5 and all(isinstance(o, devmod.OutputTooLarge) for o in outs)
    assert "over the limit" in repr(outs[0])
    cmp = compare_outputs(outs[:1], [torch.zeros(4096)], judge="allclose", atol=1e-2, rtol=1e-2)
    assert not cmp.ok
    # the files such outputs were written to go, and the shared buffer is poisoned, as after a read
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "o0.bin").write_bytes(b"x")
    poisoned: list[int] = []
    slot._share_out = SimpleNamespace(poison=lambda: poisoned.append(1))
    desc = {"file": "o0.bin", "dtype": "float32", "shape": [8192]}
    assert isinstance(devmod.DeviceEvaluator._read_outputs(slot, {"descs": [desc]}, tmp_path)[0],
                      devmod.OutputTooLarge)
    assert not (tmp_path / "outputs" / "o0.bin").exists() and poisoned == [1]
    slot._share_out = None
    # within the limit they are read as before (here: no shared buffer, a protocol violation)
    with pytest.raises(devmod.TensorFormatError):
        devmod.DeviceEvaluator._read_outputs(slot, {"descs": [big]}, tmp_path)
    assert devmod._described_nbytes({"file": "x", "dtype": "float16", "shape": [3, 5]}) == 30
    assert devmod._described_nbytes({"value": 3}) == 0 and devmod._described_nbytes({"file": "x"}) == 0


def test_with_no_shared_plan_fitting_the_least_shared_one_is_the_best():
    """Review of stop 20: where no plan that shares the sets fits the device, the job plans for the least
    shared one (alone on the device), not the largest."""
    slot = _slot()
    need = memory_need(slot._planner(_ctx(6.0, 24.0), H200, baselines=True), H200)
    assert need.high_plan == need.low_plan and need.high_plan.exchange == "staged"
    assert need.high_plan.timing_sets == 1 and need.high_claim == 1.0


def test_measuring_baselines_claims_memory_as_a_job_does_and_gives_it_back(tmp_path):
    """``kbench baseline`` with several slots on one GPU: the reference's set-up and the baselines' timing
    sets are claimed in the ledger (their timing sets sized by that claim, not by the last job's share),
    and the claim goes back even when timing fails."""
    import contextlib

    from kernelbench_harness.execution import device as devmod

    calls: list[str] = []
    ctx = SimpleNamespace(memory_share=None, baseline_info={"eager": {"compile_s": 0.0}})
    slot = SimpleNamespace(memory_share=0.25, _job_share=0.9, device=SimpleNamespace(type="cpu"), _in_job=False,
                           _gpu_work=contextlib.nullcontext,
                           _claim_for_setup=lambda *a: calls.append("claim set-up"),
                           context=lambda *a: calls.append("set up") or ctx,
                           _plan_memory=lambda c, phase, baselines=False: calls.append(f"plan baselines={baselines}"),
                           _prepare_baselines=lambda *a: calls.append("prepare") or {},
                           _time_baseline_block=lambda *a: None,
                           _finish_baselines=lambda *a: calls.append("finish") or {"eager": "stats"},
                           _give_memory_back=lambda free_contexts=False: calls.append(
                               "give back, contexts freed" if free_contexts else "give back"))
    from kernelbench_harness.protocols import get_protocol

    proto = get_protocol("kbench")
    assert devmod.DeviceEvaluator.measure_baselines(slot, object(), proto, 0, ["eager"]) == {"eager": "stats"}
    # a large context is freed before the claim goes (in the lock's shared hold); its info is kept first
    assert calls == ["claim set-up", "set up", "plan baselines=True", "prepare", "finish", "give back, contexts freed"]
    assert slot._job_share == 0.25 and slot.last_baseline_info == {"eager": {"compile_s": 0.0}}
    calls.clear()

    def fail(*a):
        raise RuntimeError("compile failed")
    slot._prepare_baselines = fail
    with pytest.raises(RuntimeError):
        devmod.DeviceEvaluator.measure_baselines(slot, object(), proto, 0, ["eager"])
    assert calls[-1] == "give back, contexts freed" and slot.last_baseline_info == {}
    # inside a candidate's job (its claim and plan cover the baselines): nothing claimed or given back
    calls.clear()
    slot._prepare_baselines = lambda *a: calls.append("prepare") or {}
    slot._in_job = True
    devmod.DeviceEvaluator.measure_baselines(slot, object(), proto, 0, ["eager"])
    assert calls == ["set up", "prepare", "finish"]


def test_no_rerun_alone_when_the_first_run_already_found_a_cheat(monkeypatch, tmp_path):
    """Review of stop 20: a re-run after an out-of-memory could pass cleanly and store ``correct`` beside a
    cheat the first run had found. A cheat or timing violation found before running out stands."""
    import contextlib

    import torch

    from kernelbench_harness.core import EvalResult, Finding, Outcome, Severity
    from kernelbench_harness.execution import device as devmod

    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    a, b = _ledgers(2, tmp_path)
    slot = _slot(0.5, b)
    slot._gpu_work = contextlib.nullcontext
    slot._give_memory_back = lambda free_contexts=False: None
    cheat = Finding("runtime.kernel-ablation", Severity.CHEAT, "kernel-not-executed", "kernels do not contribute")
    runs: list[int] = []

    def evaluate(job):
        runs.append(1)
        return EvalResult(Outcome.RUNTIME_ERROR, error="reference failed: out of memory", findings=(cheat,),
                          extra={"harness_error": True, "trusted_oom": True, "phase": "recheck"})
    slot._evaluate = evaluate
    res = devmod.DeviceEvaluator.evaluate(slot, SimpleNamespace(large=False))
    assert runs == [1] and "rerun_alone" not in res.extra and cheat in res.findings


def test_an_alone_rerun_whose_claim_fell_back_plans_for_the_fixed_share(monkeypatch, tmp_path):
    """Review of stop 20: a whole-device claim taken after its wait ran out (others still hold theirs) must not
    plan for the whole device."""

    from kernelbench_harness.execution import device as devmod

    _pretend_cuda(monkeypatch)
    a, b = _ledgers(2, tmp_path)
    slot = _slot(0.5, b)
    slot.MEMORY_WAIT_MAX_S = 0.1
    slot.PHYSICAL_WAIT_MAX_S = 0.1
    a.claim([0.5], wait_s=0.1, fallback=0.5)  # the other slot's job, going on
    slot._alone = True
    devmod.DeviceEvaluator._claim_device_alone(slot, {})
    assert slot._alone_fell is True and b.claims[1] == 1.0
    ctx = _ctx(0.5, 0.5)
    devmod.DeviceEvaluator._plan_memory(slot, ctx, {})
    assert ctx.memory_share == pytest.approx(0.5)


def test_a_large_jobs_memory_is_kept_for_the_next_large_job_and_not_for_small_ones(tmp_path):
    """The lane's reserve (H200 session 16: each large job waited 5.4 s for memory that small jobs started
    between two large ones held): what a large job gives back stays reserved; the next large job's set-up
    claim draws on it and leaves the rest reserved for its plan's claim, which then takes what it needs and
    lets the rest go."""
    a, b, c = _ledgers(3, tmp_path)
    a.lane = True
    assert a.try_claim([0.7]) == pytest.approx(0.7)
    a.release()
    a.lane = False  # (slot 0's next job is a small one)
    assert a.claims[0] == 0.0 and b.reserve() == pytest.approx(0.7)
    assert b.try_claim([0.1]) == pytest.approx(0.1)
    assert a.try_claim([0.25]) is None  # a small job sees the reserve as held (it fits beside it: kept)
    assert int(a.pending[0]) == 0 and a.reserve() == pytest.approx(0.7)
    a.release()  # (gives up its wait)
    assert a.try_claim([0.2]) == pytest.approx(0.2)
    c.lane = True  # the next large job, in another slot
    assert c.others() == pytest.approx(0.3)
    assert c.try_claim([0.2], keep_reserve=True) == pytest.approx(0.2)  # its set-up's claim
    assert c.reserve() == pytest.approx(0.5) and b.others() == pytest.approx(0.9)
    c.release(between=True)  # before its plan's claim: back into the reserve
    assert c.reserve() == pytest.approx(0.7)
    assert c.try_claim([0.6]) == pytest.approx(0.6)  # the plan's: granted at once, the rest no longer reserved
    assert c.reserve() == 0.0 and b.others() == pytest.approx(0.8)
    assert b.try_claim([0.2]) == pytest.approx(0.2)  # (b's next small job, a larger one)
    c.release()
    c.lane = False
    assert c.reserve() == pytest.approx(0.6)
    assert b.try_claim([0.25]) is None


def test_the_lanes_reserve_lapses_ends_and_gives_way_to_a_job_that_needs_the_whole_device(tmp_path, monkeypatch):
    from kernelbench_harness.execution import memledger

    a, b, small = _ledgers(3, tmp_path)
    small.try_claim([0.1])  # a small job runs throughout
    a.lane = True
    a.try_claim([0.8])
    a.release()
    assert b.try_claim([0.15]) is None and int(b.pending[0]) == 1  # fits beside the reserve: it waits
    b.release()
    # the executor: no large job left on the device
    MemoryLedger(a.claims, a.pending, a.lock.path, -1).end_lane()
    assert b.reserve() == 0.0 and b.try_claim([0.15]) == pytest.approx(0.15)
    b.release()
    # a reserve nobody claims lapses
    monkeypatch.setattr(memledger, "LANE_HOLD_S", 0.2)
    a.try_claim([0.8])
    a.release()
    assert b.try_claim([0.15]) is None
    b.release()
    time.sleep(0.25)
    assert b.reserve() == 0.0 and b.try_claim([0.15]) == pytest.approx(0.15)
    b.release()
    # a job waiting for more than the device leaves beside the reserve (a re-run with the whole device
    # claimed) does not wait for the lane to end: the reserve is not kept
    monkeypatch.setattr(memledger, "LANE_HOLD_S", 20.0)
    small.release()
    a.try_claim([0.8])
    assert b.try_claim([1.0]) is None and int(b.pending[0]) == 1
    a.release()
    assert a.reserve() == 0.0 and b.try_claim([1.0]) == pytest.approx(1.0)
    b.release()
    # a small waiter does not undo it: it fits beside the reserve once the running small jobs finish
    (tmp_path / "three").mkdir()
    lane, small, waiter = _ledgers(3, tmp_path / "three")
    lane.lane = True
    lane.try_claim([0.7])
    small.try_claim([0.2])
    assert waiter.try_claim([0.2]) is None and int(waiter.pending[0]) == 2
    lane.release()
    assert lane.reserve() == pytest.approx(0.7) and waiter.try_claim([0.2]) is None
    small.release()
    assert waiter.try_claim([0.2]) == pytest.approx(0.2)


def _job_slot(monkeypatch, tmp_path):
    """Two ledgers on a pretend H200 and a slot on the second whose evaluate() runs as DeviceEvaluator's (the
    test sets ``slot._evaluate``): ``(other ledger, slot's ledger, slot)``."""
    import contextlib

    from kernelbench_harness.execution import device as devmod

    _pretend_cuda(monkeypatch)
    a, b = _ledgers(2, tmp_path)
    slot = _slot(0.5, b)
    slot._gpu_work = contextlib.nullcontext
    slot._free_contexts = lambda: None
    slot.CONTEXT_KEEP_MAX_BYTES = devmod.DeviceEvaluator.CONTEXT_KEEP_MAX_BYTES
    slot._give_memory_back = lambda free_contexts=False: devmod.DeviceEvaluator._give_memory_back(slot, free_contexts)
    return a, b, slot


def test_a_large_jobs_evaluation_leaves_its_claim_to_the_lane(monkeypatch, tmp_path):
    """DeviceEvaluator.evaluate marks the slot's ledger handle for a large job (EvalJob.large) only: its claims
    are given back into the lane's reserve at the end, and the mark is cleared."""
    import torch

    from kernelbench_harness.core import EvalResult, Outcome
    from kernelbench_harness.execution import device as devmod

    a, b, slot = _job_slot(monkeypatch, tmp_path)
    ctx = _ctx(6.0, 6.0)
    marks: list[bool] = []

    def evaluate(job):
        marks.append(b.lane)
        devmod.DeviceEvaluator._plan_memory(slot, ctx, {})
        return EvalResult(Outcome.CORRECT, extra={"memory_claim": slot._job_claim})
    slot._evaluate = evaluate
    need, _ = _need(ctx)
    res = devmod.DeviceEvaluator.evaluate(slot, SimpleNamespace(large=True))
    assert res.outcome is Outcome.CORRECT and marks == [True] and b.lane is False
    assert b.claims[1] == 0.0 and a.reserve() == pytest.approx(need.low_claim)  # the lane plans lean
    assert a.others() == pytest.approx(need.low_claim)  # the other slot sees it as held
    MemoryLedger(a.claims, a.pending, a.lock.path, -1).end_lane()  # (the executor: no large job follows)
    devmod.DeviceEvaluator.evaluate(slot, SimpleNamespace(large=False))  # another job's claim is not kept
    assert marks == [True, False] and b.lane is False
    assert a.reserve() == 0.0 and a.try_claim([1.0]) == pytest.approx(1.0)
    del torch


def test_the_executor_ends_the_lanes_reserve_when_no_large_job_follows(monkeypatch):
    """LocalExecutor._call: after a large job, the reserve stays while the queue hands the next large job a
    slot on that device, and ends when none follows."""
    import asyncio

    from kernelbench_harness.executors import local

    seen: list[tuple[str, float]] = []

    class FakeSlot:
        def __init__(self, index, device, options, timing_lock, window_queue=None, slot_pids=None, ledger=None):
            self.index, self.device, self.fingerprint, self.proc = index, device, {}, None
            self.led = MemoryLedger(*ledger)

        def wait_ready(self):
            pass

        def stop(self):
            pass

        def call(self, msg):  # a large job: claims, then gives its claim back into the reserve
            seen.append((msg[1], self.led.reserve()))
            self.led.lane = True
            self.led.try_claim([0.6])
            time.sleep(0.05)
            self.led.release()
            self.led.lane = False
            return "ok", None

    monkeypatch.setattr(local, "_Slot", FakeSlot)
    saved = os.sched_getaffinity(0)
    try:
        ex = local.LocalExecutor(["cuda:0", "cuda:0"], {"timing_cpus": 0})
    finally:
        os.sched_setaffinity(0, saved)

    async def go():
        await asyncio.gather(ex._call("k1", ("evaluate", "first"), large=True),
                             ex._call("k2", ("evaluate", "second"), large=True))
    try:
        asyncio.run(go())
        assert [s for s, _ in seen] == ["first", "second"]  # one large job at a time on the device
        assert seen[0][1] == 0.0 and seen[1][1] == pytest.approx(0.6)  # the second found the first's memory kept
        assert ex._lane_ledgers["cuda:0"].reserve() == 0.0  # none followed the second: ended
    finally:
        asyncio.run(ex.close())


def test_a_rerun_with_the_whole_device_ends_the_reserve_whenever_it_asks_and_a_mid_size_job_gets_in_next(tmp_path):
    """Review of 1e936e1: the reserve was dropped only when a large job gave a claim back, so a re-run with the
    whole device that asked while the reserve sat idle waited for the lane to end. A job that only cannot fit
    beside the reserve (a mid-size one) waits beside it, and gets in when the next large job gives back."""
    a, b, c = _ledgers(3, tmp_path)
    a.lane = True
    a.try_claim([0.7])
    a.release()
    assert b.reserve() == pytest.approx(0.7)
    assert b.try_claim([0.2]) == pytest.approx(0.2)  # fits beside it: the reserve stays
    assert c.try_claim([1.0]) is None  # the whole device: the reserve goes, and c waits for b's claim
    assert c.reserve() == 0.0 and int(c.pending[0]) == 2
    assert a.try_claim([0.7], keep_reserve=True) is None  # the next large job is held back by the turnstile for c
    b.release()
    assert c.try_claim([1.0]) == pytest.approx(1.0)
    c.release()
    # a mid-size job: it waits beside the reserve, the next large job goes on, and it is let in after that one
    a.try_claim([0.7])
    a.release()
    assert b.try_claim([0.5]) is None and int(b.pending[0]) == 1 and b.reserve() == pytest.approx(0.7)
    assert a.try_claim([0.3], keep_reserve=True) == pytest.approx(0.3)  # the next large job's set-up
    a.release(between=True)  # given back before its plan's claim: kept, whoever waits
    assert a.reserve() == pytest.approx(0.7)
    assert a.try_claim([0.6]) == pytest.approx(0.6)  # its plan's claim: within what the lane held
    assert a.reserve() == 0.0 and b.try_claim([0.5]) is None  # 0.6 and 0.5 do not fit together
    a.release()  # it gives back while b waits for more than the device leaves beside it: not kept
    assert a.reserve() == 0.0 and b.try_claim([0.5]) == pytest.approx(0.5)


def test_what_a_set_up_claim_keeps_counts_what_the_slot_held_and_a_reserve_never_overcommits(tmp_path):
    a, b = _ledgers(2, tmp_path)
    a.lane = True
    a.try_claim([0.4])
    a.release()  # reserve 0.4
    a.try_claim([0.3], keep_reserve=True)  # 0.3 held, 0.1 kept
    assert a.claims[0] == pytest.approx(0.3) and a.reserve() == pytest.approx(0.1)
    a.try_claim([0.35], keep_reserve=True)  # a larger claim in place of the first: the lane had 0.4 in all
    assert a.claims[0] == pytest.approx(0.35) and a.reserve() == pytest.approx(0.05)
    # another slot's claim taken whatever the others hold (its wait ran out): the reserve kept is what is left
    b.claims[1] = 0.9
    a.release()
    assert a.reserve() == pytest.approx(0.1)


def test_a_large_jobs_rerun_with_the_whole_device_is_not_kept_for_the_lane(monkeypatch, tmp_path):
    from kernelbench_harness.core import Outcome
    from kernelbench_harness.execution import device as devmod

    a, b, slot = _job_slot(monkeypatch, tmp_path)
    ctx = _ctx(6.0, 6.0)
    runs = _oom_then_correct(slot, ctx, claim_alone=True)
    res = devmod.DeviceEvaluator.evaluate(slot, SimpleNamespace(large=True))
    assert res.outcome is Outcome.CORRECT and runs[1] == (True, 1.0)
    assert a.reserve() == 0.0 and a.try_claim([1.0]) == pytest.approx(1.0)


def test_a_large_jobs_claim_the_reserve_cannot_cover_ends_it_so_nothing_stalls(tmp_path):
    """Review of 9c64ac4: a large job whose plan's claim was larger than the reserve, with a mid-size job waiting
    that could not fit beside the reserve, left every claim at 0 until the reserve lapsed (20 s)."""
    a, b = _ledgers(2, tmp_path)
    a.lane = True
    a.try_claim([0.67])
    a.release()  # the reserve: 0.67
    assert a.try_claim([0.4], keep_reserve=True) == pytest.approx(0.4)  # the next large job's set-up
    assert b.try_claim([0.5]) is None and int(b.pending[0]) == 1  # a mid-size job waits
    a.release(between=True)
    assert a.reserve() == pytest.approx(0.67)
    assert a.try_claim([0.8]) is None  # its plan's claim: more than the lane holds, and b waits
    assert a.reserve() == 0.0  # the reserve went with it
    assert b.try_claim([0.5]) == pytest.approx(0.5)  # b goes at once (not after the reserve lapsed)
    assert a.try_claim([0.8]) is None and int(a.pending[0]) == 0  # and the large job waits behind it
    b.release()
    assert a.try_claim([0.8]) == pytest.approx(0.8)
