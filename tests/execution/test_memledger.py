"""The memory ledger of slots sharing one GPU: a job's share is sized by the problem, a large job is
granted what the small ones leave, waits (with a turnstile) when there is not enough, falls back to the
fixed 1/N share when the wait runs out, and a dead slot's claim is cleared."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import pytest

from kernelbench_harness.execution.device import TIMING_SETS_FRACTION, DeviceEvaluator, share_plan, timing_set_count
from kernelbench_harness.execution.memledger import (MemoryLedger, MemoryNeed, clear_slot, job_share, memory_need,
                                                     new_state)

GIB = 1 << 30
H200 = int(139.8 * GIB)


def _need(set_gib: float, out_gib: float, n_sets: int = 6, refs_gib: float = 0.0, k: int = 3) -> MemoryNeed:
    return memory_need(n_sets=n_sets, set_nbytes=int(set_gib * GIB), out_nbytes=int(out_gib * GIB),
                       ref_nbytes=int(refs_gib * GIB), timing_sets=k, total_bytes=H200,
                       share_fraction=DeviceEvaluator.SHARE_MAX_FRACTION, timing_fraction=TIMING_SETS_FRACTION)


def _ledgers(n: int) -> list[MemoryLedger]:
    claims, pending, lock = new_state(mp.get_context("spawn"), n)
    return [MemoryLedger(claims, pending, lock, i) for i in range(n)]


def test_need_of_a_small_problem_is_a_sliver_and_complete_at_the_fixed_share():
    need = _need(0.01, 0.01)
    assert need.shareable and need.high < 0.01
    # the planner's own rules give the full plan at that share: every set shared, every timing set
    cap = need.high * H200
    assert share_plan(6, int(0.01 * GIB), int(0.01 * GIB), int(cap), DeviceEvaluator.SHARE_MAX_FRACTION) == "all"
    assert timing_set_count(3, 5, int(0.01 * GIB), int(cap) + 1) == 3


def test_need_of_a_large_level1_problem_matches_the_planners_thresholds():
    # current KernelBench L1/19-32: 6 GiB input sets and outputs on an H200 (139.8 GiB)
    need = _need(6.0, 6.0)
    assert need.shareable and need.high == 1.0
    # at ``low`` one set is staged through shared memory; just below it, the sets would go through files
    assert share_plan(6, 6 * GIB, 6 * GIB, int(need.low * H200) + 1, DeviceEvaluator.SHARE_MAX_FRACTION) == "staged"
    assert share_plan(6, 6 * GIB, 6 * GIB, int(need.low * H200 * 0.99), DeviceEvaluator.SHARE_MAX_FRACTION) is None
    # with 6 slots the fixed share (1/6) is below it: the reason for the ledger
    assert need.low > 1 / 6
    # stored references come on top of both
    with_refs = _need(6.0, 6.0, refs_gib=14.0)
    assert with_refs.low == pytest.approx(need.low + 14 * GIB / H200)


def test_need_of_sets_that_never_fit_or_cannot_be_shared():
    huge = _need(40.0, 40.0)  # one set plus the output over 35% of the device: files at any share
    assert not huge.shareable
    nested = memory_need(n_sets=6, set_nbytes=0, out_nbytes=GIB, ref_nbytes=GIB, timing_sets=3, total_bytes=H200,
                         share_fraction=0.35, timing_fraction=0.25)
    assert not nested.shareable and nested.low == nested.high == pytest.approx(GIB / H200)
    with pytest.raises(ValueError):
        memory_need(n_sets=1, set_nbytes=1, out_nbytes=1, ref_nbytes=0, timing_sets=1, total_bytes=0,
                    share_fraction=0.35, timing_fraction=0.25)


def test_a_large_job_gets_what_the_small_ones_leave_and_a_second_waits():
    slots = _ledgers(6)
    for led in slots[:4]:  # four small jobs: each claims the floor and plans for 1/6
        share, waited = job_share(led, _need(0.01, 0.01), 1 / 6, wait_s=1.0)
        assert share == pytest.approx(1 / 6) and waited == 0.0
        assert led.claims[led.index] == pytest.approx(MemoryLedger.FLOOR)
    big = _need(6.0, 6.0)
    share, waited = job_share(slots[4], big, 1 / 6, wait_s=1.0)
    assert share == pytest.approx(1.0 - 4 * MemoryLedger.FLOOR) and waited == 0.0
    assert share > big.low > 1 / 6  # staged through shared memory instead of files
    # a second large job has nothing left: it does not get a share now, and becomes the one waiting
    assert slots[5].try_claim(big.low, big.high) is None
    assert int(slots[5].pending[0]) == 5
    # a small job may start beside it only out of what exceeds the waiting job's share: none is left
    slots[0].release()
    assert slots[0].try_claim(MemoryLedger.FLOOR, MemoryLedger.FLOOR) is None
    # once the first large job is done the waiting one is granted, and the turnstile opens
    slots[4].release()
    got = slots[5].try_claim(big.low, big.high)
    assert got is not None and got >= big.low and int(slots[5].pending[0]) == -1
    assert got == pytest.approx(1.0 - 3 * MemoryLedger.FLOOR)  # all the three small ones leave
    assert slots[0].try_claim(MemoryLedger.FLOOR, MemoryLedger.FLOOR) is None
    assert sum(slots[0].claims[:]) <= MemoryLedger.CAPACITY + 1e-9


def test_a_waiting_job_gives_its_lock_up_once_and_is_granted_when_another_finishes():
    a, b = _ledgers(2)
    assert a.claim(0.8, 0.8, wait_s=1.0)[0] == pytest.approx(0.8)
    calls: list[float] = []
    threading.Timer(0.3, a.release).start()
    share, waited, fell = b.claim(0.5, 0.9, wait_s=10.0, on_wait=lambda: calls.append(time.monotonic()))
    assert not fell and share == pytest.approx(0.9) and 0.2 < waited < 5.0
    assert len(calls) == 1  # the caller gave the device's lock up once, before the first wait


def test_a_wait_that_runs_out_plans_for_the_fixed_share():
    a, b, c = _ledgers(3)
    a.claim(0.9, 0.9, wait_s=0.1)
    share, waited, fell = b.claim(0.5, 1.0, wait_s=0.2)
    assert fell and share == pytest.approx(1 / 3) and waited >= 0.2
    assert int(b.pending[0]) == -1  # its wait is over: others claim freely again
    assert b.claims[1] == pytest.approx(1 / 3)
    # through job_share: the fixed share is planned for
    b.release()
    assert job_share(c, _need(6.0, 6.0), 1 / 3, wait_s=0.1)[0] == pytest.approx(1 / 3)


def test_a_dead_slots_claim_and_wait_are_cleared():
    a, b = _ledgers(2)
    a.claim(0.7, 0.7, wait_s=0.1)
    assert b.try_claim(0.5, 0.5) is None and int(b.pending[0]) == 1
    clear_slot(b.claims, b.pending, 1)
    clear_slot(a.claims, a.pending, 0)
    assert list(a.claims[:]) == [0.0, 0.0] and int(a.pending[0]) == -1
    assert b.try_claim(0.5, 0.5) == pytest.approx(0.5)


def _claim_in_child(claims, pending, lock, index, share):  # runs in a spawned process
    MemoryLedger(claims, pending, lock, index).claim(share, share, wait_s=1.0)


def test_claims_are_seen_across_processes():
    ctx = mp.get_context("spawn")
    claims, pending, lock = new_state(ctx, 2)
    p = ctx.Process(target=_claim_in_child, args=(claims, pending, lock, 1, 0.6))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    here = MemoryLedger(claims, pending, lock, 0)
    assert here.others() == pytest.approx(0.6)
    assert here.try_claim(0.5, 0.5) is None  # 0.4 left


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

    import os

    monkeypatch.setattr(local, "_Slot", FakeSlot)
    saved = os.sched_getaffinity(0)
    try:
        local.LocalExecutor(["cuda:0", "cuda:0", "cuda:1"], {"timing_cpus": 0})
    finally:
        os.sched_setaffinity(0, saved)  # no core plan with timing_cpus=0; restored all the same
    (i0, _, l0), (i1, _, l1), (_, _, l2) = made
    assert l0 is not None and l1 is not None and l2 is None  # one slot on cuda:1: no ledger
    assert l0[0] is l1[0] and (l0[3], l1[3]) == (0, 1)
    made.clear()
    monkeypatch.setenv("KBENCH_MEMORY_LEDGER", "0")
    local.LocalExecutor(["cuda:0", "cuda:0"], {"timing_cpus": 0})
    assert all(led is None for _, _, led in made)


def test_a_slot_plans_its_job_for_the_granted_share_and_gives_the_host_lock_up_while_it_waits(monkeypatch):
    """DeviceEvaluator._plan_memory on a (pretend) CUDA device: the share it plans for, the lock it gives
    up while waiting for memory and takes back, the wait it records."""
    from types import SimpleNamespace

    import torch

    from kernelbench_harness.execution import device as devmod

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=H200))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    a, b = _ledgers(2)
    events: list[str] = []
    lock = SimpleNamespace(release=lambda: events.append("released"))
    slot = SimpleNamespace(memory_share=0.5, memory_ledger=b, device=torch.device("cuda:0"), _gpu_share=lock,
                           SHARE_MAX_FRACTION=DeviceEvaluator.SHARE_MAX_FRACTION, MEMORY_WAIT_MAX_S=10.0,
                           _take_shared=lambda lk: events.append("taken back"))
    ctx = SimpleNamespace(n_sets=6, share_set_nbytes=6 * GIB, share_places=[{}], out_nbytes=6 * GIB,
                          lazy_refs=True, ref_estimate_bytes=36 * GIB, protocol=SimpleNamespace(rotate_inputs=3),
                          n_correct=5, memory_share=0.5)
    a.claim(0.9, 0.9, wait_s=0.1)  # the other slot holds most of the device
    threading.Timer(0.3, a.release).start()
    phase: dict[str, float] = {}
    devmod.DeviceEvaluator._plan_memory(slot, ctx, phase)
    assert events == ["released", "taken back"]
    assert phase["memory_wait"] > 0.2
    assert ctx.memory_share == slot._job_share == pytest.approx(1.0)  # alone now: planned as alone
    # a small problem beside it: planned for the fixed share, claiming only the floor
    small = SimpleNamespace(**{**vars(ctx), "share_set_nbytes": 1 << 20, "out_nbytes": 1 << 20})
    a.release()
    b.release()
    devmod.DeviceEvaluator._plan_memory(slot, small, {})
    assert small.memory_share == pytest.approx(0.5) and b.claims[1] == pytest.approx(MemoryLedger.FLOOR)
