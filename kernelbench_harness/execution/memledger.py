"""How much of one GPU's memory each of a run's slots on it plans for, shared between the slots.

With N slots on one GPU (``--gpus 0,0``, ``--slots-per-gpu N``) each slot used to plan for a fixed 1/N of
the device's memory (:func:`.device.planned_memory`): its shared input sets, its candidate's timing
copies. Most problems need a sliver of that; the level-1 problems of current KernelBench whose input
sets take 6-16 GiB need more than 1/N once N is 3 or more, and their sets then went through files
(about 80 s a problem on an H200, against 5-7 s shared). The ledger lets a slot plan for what its job
needs while the other slots' jobs need little:

- each job asks for a range of shares ``[low, high]``: ``high`` lets it plan as it would alone on the
  device, ``low`` is the least with which its sets still go through shared device memory (one staged set);
  :func:`memory_need` computes both from the problem's sizes;
- it is granted ``min(high, what the other slots leave)`` at once when that is at least ``low``; else it
  waits, and while it waits other slots' new jobs are granted only out of what exceeds its ``low`` (the
  running jobs finish and give their shares back, so a large job is not starved by a stream of small
  ones, and small ones go on beside it where there is room);
- a job that waited ``wait_s`` in vain plans for the fixed 1/N, as before the ledger (files for the
  largest sets) and records that it did.

Claims are fractions of the device's total memory, the unit of the slot's ``memory_share``; a job that
needs less than 1/N plans exactly as with the fixed share (its plan is complete at 1/N) and claims only
its need (at least ``FLOOR``), which leaves the rest to a large job beside it. Large jobs therefore run
one or two at a time per device, next to the small ones, instead of through files in every slot.

The shared state is two lock-free arrays and one lock per device, made by the executor; the lock is
held only for a few reads and writes. A slot that dies with a claim has it cleared by the executor
(:func:`clear_slot`). ``KBENCH_MEMORY_LEDGER=0`` switches it off (every slot plans for 1/N again).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["MemoryLedger", "MemoryNeed", "memory_need", "job_share", "new_state", "clear_slot", "enabled"]

log = logging.getLogger(__name__)


def enabled() -> bool:
    """Whether runs share a GPU's memory through the ledger (``KBENCH_MEMORY_LEDGER``, default on)."""
    return os.environ.get("KBENCH_MEMORY_LEDGER", "1").strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    """A job's shares of the device's memory (fractions of its total): ``low`` (input sets staged
    through one shared buffer, one timing set) and ``high`` (every set shared, every timing set), both
    capped at 1.0; ``shareable`` is False where no share would let one set through shared memory."""

    low: float
    high: float
    shareable: bool


def memory_need(*, n_sets: int, set_nbytes: int, out_nbytes: int, ref_nbytes: int, timing_sets: int,
                total_bytes: int, share_fraction: float, timing_fraction: float) -> MemoryNeed:
    """The shares of a device's memory with which a job plans as it would alone on the device (``high``)
    and with which its sets still go through shared device memory (``low``).

    The planner reserves ``share_fraction`` of a share for the shared input sets and output buffer
    (:func:`.device.share_plan`) and ``timing_fraction`` for the candidate's timing copies, two of each
    timed set plus one (:func:`.device.timing_set_count`); stored references come on top.

    Args:
        n_sets: input sets of the problem (correctness trials plus the re-check set).
        set_nbytes: bytes of one input set in a shared buffer (0: the sets cannot be shared).
        out_nbytes: bytes of the shared output buffer.
        ref_nbytes: bytes of the stored reference outputs (0 when they are recomputed, ``lazy``).
        timing_sets: input sets the protocol's timing cycles through (``rotate_inputs``, at most the
            correctness sets).
        total_bytes: the device's total memory.
        share_fraction, timing_fraction: ``DeviceEvaluator.SHARE_MAX_FRACTION`` and
            :data:`.device.TIMING_SETS_FRACTION`.

    Raises:
        ValueError: ``total_bytes`` or a fraction is not positive.
    """
    if total_bytes <= 0 or share_fraction <= 0 or timing_fraction <= 0:
        raise ValueError("memory_need: total_bytes and the fractions must be positive")
    refs = max(0, ref_nbytes) / total_bytes
    if set_nbytes <= 0:
        need = min(1.0, refs)
        return MemoryNeed(need, need, False)
    all_sets = (n_sets * set_nbytes + out_nbytes) / (share_fraction * total_bytes)
    staged = (set_nbytes + out_nbytes) / (share_fraction * total_bytes)
    timing = (2 * max(1, timing_sets) + 1) * set_nbytes / (timing_fraction * total_bytes)
    high = min(1.0, max(all_sets, timing) + refs)
    low = staged + refs
    if low > 1.0:  # not even one set fits: the sets go through files whatever the share
        return MemoryNeed(high, high, False)
    return MemoryNeed(min(low, high), high, True)


class MemoryLedger:
    """One slot's handle on its device's ledger.

    Args:
        claims: ``multiprocessing.Array("d", N, lock=False)``, each slot's claimed share (0.0 when idle).
        pending: ``multiprocessing.Array("d", [-1, 0], lock=False)``: the slot whose job waits for memory
            (-1: none) and the share it waits for; while it is set, other slots' new jobs are granted only
            out of what exceeds that share.
        lock: ``multiprocessing.Lock`` guarding both (held for a few reads and writes).
        index: this slot's index in ``claims``.

    The share a slot plans for with N slots and no ledger is 1/N (:attr:`fixed`).
    """

    #: the smallest claim, for a job whose planned sets are tiny: the candidate's own allocations and
    #: the reference's work are not in the plan (at most the fixed share)
    FLOOR = 0.05
    #: the most the slots' claims add up to
    CAPACITY = 1.0
    #: how often a waiting job looks again
    POLL_S = 0.02
    #: the longest ``lock`` is waited for before the ledger is read without it (a slot killed while
    #: holding it must not stall the others)
    LOCK_WAIT_S = 5.0

    def __init__(self, claims: Any, pending: Any, lock: Any, index: int) -> None:
        self.claims = claims
        self.pending = pending
        self.lock = lock
        self.index = index

    @property
    def fixed(self) -> float:
        """The share with N slots and no ledger: 1/N."""
        return 1.0 / max(1, len(self.claims))

    def others(self) -> float:
        """The shares the device's other slots claim now."""
        return sum(c for j, c in enumerate(self.claims[:]) if j != self.index)

    def _locked(self, fn: Callable[[], Any]) -> Any:
        got = self.lock.acquire(timeout=self.LOCK_WAIT_S)
        try:
            return fn()
        finally:
            if got:
                self.lock.release()

    def _waiting(self) -> tuple[int, float]:
        return int(self.pending[0]), float(self.pending[1])

    def _set_waiting(self, index: int, low: float) -> None:
        self.pending[1] = low
        self.pending[0] = index

    def try_claim(self, low: float, high: float) -> float | None:
        """Claim ``min(high, what the others leave)`` if that is at least ``low``; None otherwise (nothing
        claimed), and this slot becomes the one waiting when nobody is. While another slot's job waits
        for ``w``, a claim is granted only out of what exceeds ``w`` (it must not lengthen that wait)."""
        def attempt() -> float | None:
            waiting, w_low = self._waiting()
            free = self.CAPACITY - self.others()
            if waiting not in (-1, self.index):
                free -= w_low
            if free + 1e-9 >= low:
                grant = max(low, min(high, free))
                self.claims[self.index] = grant
                if waiting == self.index:
                    self._set_waiting(-1, 0.0)
                return grant
            if waiting == -1:
                self._set_waiting(self.index, low)  # the running jobs give back; new ones leave it room
            return None
        return self._locked(attempt)

    def claim(self, low: float, high: float, *, wait_s: float,
              on_wait: Callable[[], None] | None = None) -> tuple[float, float, bool]:
        """Claim a share for one job: see the module's description.

        Args:
            low, high: the job's range (:func:`memory_need`, with ``low <= high``); for a job that needs
                at most the fixed share pass ``low = high = max(need, FLOOR)``, capped at the fixed share.
            wait_s: the longest to wait for ``low``; then the fixed share is claimed whatever the others
                hold (the plan before the ledger).
            on_wait: called once before the first wait (the caller gives up the device's host lock then:
                a slot waiting for memory must not hold up the timing windows that let others finish).

        Returns:
            ``(share, waited_s, fell_back)``: the share to plan for (also this slot's claim until
            :meth:`release`), seconds waited, and whether the wait ran out.
        """
        low = max(0.0, min(low, 1.0))
        high = max(low, min(high, 1.0))
        t0 = time.monotonic()
        got = self.try_claim(low, high)
        if got is not None:
            return got, 0.0, False
        if on_wait is not None:
            on_wait()
        end = t0 + wait_s
        while time.monotonic() < end:
            time.sleep(self.POLL_S)
            got = self.try_claim(low, high)
            if got is not None:
                return got, time.monotonic() - t0, False

        def fall_back() -> float:
            if self._waiting()[0] == self.index:
                self._set_waiting(-1, 0.0)
            share = min(self.fixed, high) if high > 0 else self.fixed
            self.claims[self.index] = share
            return share
        share = self._locked(fall_back)
        log.warning("no device memory for a share of %.2f within %.0f s (others hold %.2f); planning for %.2f",
                    low, wait_s, self.others(), share)
        return share, time.monotonic() - t0, True

    def release(self) -> None:
        """This slot's job is done: its claim (and its wait, if any) is given back."""
        def give_back() -> None:
            self.claims[self.index] = 0.0
            if self._waiting()[0] == self.index:
                self._set_waiting(-1, 0.0)
        self._locked(give_back)


def job_share(ledger: MemoryLedger, need: MemoryNeed, fixed_share: float, *, wait_s: float,
              on_wait: Callable[[], None] | None = None) -> tuple[float, float]:
    """The share of the device's memory one job plans for, claimed in ``ledger`` until its
    :meth:`MemoryLedger.release`: a job complete at ``fixed_share`` (1/N), or one whose sets cannot be
    shared at any share, plans for ``fixed_share`` and claims only its need (at least
    :attr:`MemoryLedger.FLOOR`); a larger one plans for what it is granted in ``[need.low, need.high]``,
    or for ``fixed_share`` when the wait ran out. Returns ``(share, seconds waited)``."""
    if need.high <= fixed_share or not need.shareable:
        c = min(fixed_share, max(need.high, ledger.FLOOR))
        _got, waited, _fell = ledger.claim(c, c, wait_s=wait_s, on_wait=on_wait)
        return fixed_share, waited
    got, waited, fell = ledger.claim(need.low, need.high, wait_s=wait_s, on_wait=on_wait)
    return (fixed_share if fell else got), waited


def new_state(ctx: Any, n_slots: int) -> tuple[Any, Any, Any]:
    """The shared state of one device's ledger for ``n_slots`` slots: ``(claims, pending, lock)`` made in
    the multiprocessing context ``ctx`` (pass them to each slot's :class:`MemoryLedger`)."""
    return ctx.Array("d", n_slots, lock=False), ctx.Array("d", [-1.0, 0.0], lock=False), ctx.Lock()


def clear_slot(claims: Any, pending: Any, index: int) -> None:
    """Give back the claim and the wait of slot ``index``, which died (called by the executor, without
    the lock: the dead slot may have held it, and a plain store of a double or an int is atomic here)."""
    claims[index] = 0.0
    if int(pending[0]) == index:
        pending[1] = 0.0
        pending[0] = -1
