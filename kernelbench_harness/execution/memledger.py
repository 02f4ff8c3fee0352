"""How much of one GPU's memory each of a run's slots on it plans for, shared between the slots.

With N slots on one GPU (``--gpus 0,0``, ``--slots-per-gpu N``) each slot used to plan for a fixed 1/N of
the device's memory (:func:`.device.planned_memory`): its shared input sets, its candidate's timing
copies, its stored references. Most problems need a sliver of that; the level-1 problems of current
KernelBench whose input sets take 6-16 GiB need more than 1/N once N is 3 or more, and their sets then
went through files (about 80 s a problem on an H200, against 5-7 s shared). The ledger lets a job plan
for what its problem needs while the other slots' jobs need little.

Two quantities per job, both fractions of the device's total memory:

- the **share** it plans for: what :func:`.device.share_plan` and :func:`.device.timing_set_count` are
  given (as before, where every slot's share was 1/N);
- the **claim**: the bytes that plan really uses (shared sets and output buffer, stored references, and
  the larger of the timing copies, two of each timed set plus one, and the judging's memory,
  :meth:`.device.DeviceEvaluator.work_nbytes`) over ``UTIL`` of the device. A plan that must take more than
  its share (one timing set always, even a 16 GiB one) claims it too. Before the judging was counted, six
  slots' claims fitted the device while their jobs used more than all of it (H200 session 12).

A large problem also claims, before its reference is set up, what the set-up takes (sized from meta tensors);
that claim goes back before the plan's is asked for, so that no job holds memory while it waits for more.
After a claim is granted the job waits for the device to have that much free (memory outside the ledger:
the warm-up pool, another run).

:func:`memory_need` finds, with the planner's own functions, the smallest share that gives the best plan
the device allows, the best whose bytes fit in ``UTIL`` of it (``high``), and the smallest that still passes
the sets through shared device memory (``low``: one staged set, one timing set), with each plan's claim. A job then:

- plans for the fixed 1/N and claims only its need when its best plan fits in 1/N (small problems: the
  plan is the same as before, and the rest of its 1/N is left to a large job beside it);
- otherwise claims ``high`` if the other slots leave room for it, else the plan of the fixed 1/N share
  where that is better than ``low``, else ``low``, else waits; while it waits, the other slots' new jobs are
  granted only what leaves room for it (a turnstile: the running jobs finish and give their claims back, so
  a large job is not starved by a stream of small ones, and small ones go on beside it where there is room);
- after ``wait_s`` in vain plans for the fixed 1/N as before the ledger (files for the largest sets),
  claiming what that plan needs, and says so in the log.

**The lane's reserve.** Problems of :data:`..schedule.LANE_BYTES` or more run one per GPU at a time, back to back
(:class:`..executors.base.AffinityQueue`), each claiming most of the device. When one ended, its claim went back
and the other slots' next jobs took it; the next large job then waited for them to finish (H200 session 16: 5.4 s
of each large job's 18.0 s). A large job's handle is marked (:attr:`MemoryLedger.lane`): what it gives back is
kept as the lane's reserve, which the other slots' jobs see as held and the next large job's claims draw from
first. The reserve goes when a large job is granted its plan's claim (what it needs), when
:data:`LANE_HOLD_S` pass without a large job claiming it, when the executor finds no large job left to run on the
device (:meth:`MemoryLedger.end_lane`), when a large job gives its claim back while another slot's job waits for more
than the device leaves beside the reserve, as soon as another slot's job asks for the whole device (a re-run after
running out of memory: it must not wait for the lane to end), when a claim falls back after its wait ran out, and
when a large job's claim is more than the reserve and the free memory cover (it then waits in the turnstile as any
job). A large job's re-run with the whole device claimed is not the lane's: its claim is not kept.

The shared state is two lock-free arrays per device, and a file lock (``flock``: the kernel releases it
when a holder dies) held for a few reads and writes. A slot that dies with a claim has it cleared by the
executor (:func:`clear_slot`). ``KBENCH_MEMORY_LEDGER=0`` switches it off (every slot plans for 1/N).
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

__all__ = ["MemoryLedger", "MemoryNeed", "Plan", "memory_need", "claim_of", "job_share", "new_state",
           "clear_slot", "enabled", "ENV", "UTIL", "LANE_HOLD_S"]

log = logging.getLogger(__name__)

ENV = "KBENCH_MEMORY_LEDGER"

#: of a share, the most a plan sets aside under the fixed shares: shared sets (35%), timing copies (25%)
#: and stored references (10%); see DeviceEvaluator.SHARE_MAX_FRACTION, device.TIMING_SETS_FRACTION and
#: ProblemContext.REF_BUDGET_CUDA_FRACTION
UTIL = 0.70

#: the longest the lane's reserve is kept (seconds) from when it was last set: for a large job that has not
#: claimed it, or for the plan's claim of one whose set-up took longer (its claim then goes through the turnstile
#: as before the reserve). The executor ends it sooner when no large job is left (:meth:`MemoryLedger.end_lane`)
LANE_HOLD_S = 20.0

# the entries of the ``pending`` array (new_state): the waiting slot and its claim; the lane's reserve and the
# time.monotonic() it lapses at (CLOCK_MONOTONIC: one clock for every process of the host)
_WAITING, _W_CLAIM, _RESERVE, _UNTIL = range(4)


def enabled() -> bool:
    """Whether runs share a GPU's memory through the ledger (``KBENCH_MEMORY_LEDGER``: 1, the default, or 0).

    Raises:
        ValueError: the variable is set to something else.
    """
    from ..envflags import env_switch

    return env_switch(ENV, expected="expected 1 (share a GPU's memory between slots by need) or 0 (a fixed 1/N)")


@dataclass(frozen=True, slots=True)
class Plan:
    """What a share of the device gives a job: how its input sets travel (``exchange``: ``"all"``,
    ``"staged"`` or ``"files"``), how many sets its timing cycles through (``timing_sets``), and the bytes
    that sets aside (``nbytes``: shared buffers, timing copies, stored references)."""

    exchange: str
    timing_sets: int
    nbytes: int

    @property
    def rank(self) -> tuple[int, int]:
        """Better plans rank higher: sets through shared memory first, then more timing sets."""
        return ({"files": 0, "staged": 1, "all": 2}[self.exchange], self.timing_sets)


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    """A job's two plans: ``high`` (the best the whole device allows) and ``low`` (the least that still
    passes its sets through shared memory; the same as ``high`` where nothing does), each with the share
    to plan for (``*_share``) and the claim it makes (``*_claim``), fractions of the device's memory."""

    low_share: float
    low_claim: float
    high_share: float
    high_claim: float
    high_plan: Plan
    low_plan: Plan
    total_bytes: int

    def claim_of(self, plan: Plan) -> float:
        """The claim of ``plan``: the bytes it sets aside over ``UTIL`` of the device, at most 1.0."""
        return claim_of(plan, self.total_bytes)


def claim_of(plan: Plan, total_bytes: int) -> float:
    """The claim of ``plan`` on a device of ``total_bytes``: its bytes over ``UTIL`` of them, at most 1.0."""
    return min(1.0, plan.nbytes / (UTIL * total_bytes))


def memory_need(plan_at: Callable[[float], Plan], total_bytes: int) -> MemoryNeed:
    """The smallest shares that give a job its best plan and its least shared plan.

    Args:
        plan_at: the planner for this job: share (fraction of the device) -> :class:`Plan`, by
            :func:`.device.share_plan` and :func:`.device.timing_set_count` (so their rounding is the one
            used here); better or equal plans for larger shares.
        total_bytes: the device's total memory.

    Raises:
        ValueError: ``total_bytes`` is not positive.
    """
    if total_bytes <= 0:
        raise ValueError("memory_need: total_bytes must be positive")

    def fits(p: Plan) -> bool:  # its bytes within UTIL of the device (a claim of at most 1.0, uncapped)
        return p.nbytes <= UTIL * total_bytes

    def boundary(ok: Callable[[Plan], bool]) -> tuple[float, float]:
        """``(lo, hi)``, 2**-40 apart: ``ok`` fails at ``lo`` and holds at ``hi`` (``ok`` holds from some share
        on); below one byte the planner sees no limit."""
        lo, hi = 1.0 / total_bytes, 1.0
        for _ in range(40):
            mid = (lo + hi) / 2
            if ok(plan_at(mid)):
                hi = mid
            else:
                lo = mid
        return lo, hi

    def smallest(ok: Callable[[Plan], bool]) -> float:
        return boundary(ok)[1]

    best = plan_at(1.0)
    if not fits(best):
        # the best plan the device holds: the plan of the largest share whose plan still fits (plans grow
        # with the share); where that one goes through files (or none fits) and the device would share the
        # sets, the least shared plan, claiming the whole device: alone on it rather than through files
        top = plan_at(boundary(lambda p: not fits(p))[0])
        if fits(top) and top.exchange != "files":
            best = top
        elif best.exchange != "files":
            best = plan_at(smallest(lambda p: p.exchange != "files"))

    high_share = smallest(lambda p: p.rank >= best.rank)
    if best.exchange == "files":
        low_share, low = high_share, best
    else:
        low_share = smallest(lambda p: p.exchange != "files")
        low = plan_at(low_share)

    return MemoryNeed(low_share, claim_of(low, total_bytes), high_share, claim_of(best, total_bytes), best, low,
                      total_bytes)


class _FileLock:
    """An exclusive ``flock`` on ``path``, opened in each process that uses it: released by the kernel if
    its holder dies."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, timeout: float | None = None) -> bool:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if end is not None and time.monotonic() >= end:
                    return False
                time.sleep(0.001)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


class MemoryLedger:
    """One slot's handle on its device's ledger.

    Args:
        claims: ``multiprocessing.Array("d", N, lock=False)``, each slot's claim (0.0 when idle).
        pending: ``multiprocessing.Array("d", [-1, 0, 0, 0], lock=False)`` (:func:`new_state`): the slot whose
            job waits for memory (-1: none) and the claim it waits for (while it is set, other slots' new jobs
            are granted only what leaves room for that claim); the lane's reserve (a fraction of the device)
            and the ``time.monotonic()`` at which it lapses. A two-entry array has no reserve.
        lock: the path of the device's ledger lock file (``flock``), or an object with
            ``acquire(timeout=...)`` and ``release()``; held for a few reads and writes.
        index: this slot's index in ``claims``.

    The share a slot plans for with N slots and no ledger is 1/N (:attr:`fixed`). :attr:`lane` is set by the
    slot for the length of a large job (see the module's description of the lane's reserve).
    """

    #: the smallest claim, for a job whose planned bytes are tiny: the candidate's own allocations and
    #: the reference's work are not in the plan (at most the fixed share)
    FLOOR = 0.05
    #: the most the slots' claims add up to
    CAPACITY = 1.0
    #: how often a waiting job looks again
    POLL_S = 0.02
    #: the longest the lock is waited for before the ledger is read without it
    LOCK_WAIT_S = 5.0

    def __init__(self, claims: Any, pending: Any, lock: Any, index: int) -> None:
        self.claims = claims
        self.pending = pending
        self.lock = _FileLock(lock) if isinstance(lock, (str, os.PathLike)) else lock
        self.index = index
        #: this slot's job is one of the lane's (a large problem): its claims draw on the lane's reserve and
        #: what it gives back is kept there
        self.lane = False

    @property
    def fixed(self) -> float:
        """The share with N slots and no ledger: 1/N."""
        return 1.0 / max(1, len(self.claims))

    def others(self) -> float:
        """The claims of the device's other slots now, with the lane's reserve where this slot's job is not
        the lane's."""
        held = sum(c for j, c in enumerate(self.claims[:]) if j != self.index)
        return held + (0.0 if self.lane else self.reserve())

    def reserve(self) -> float:
        """The lane's reserve now (0.0 once it has lapsed, or without one)."""
        if len(self.pending) <= _UNTIL or time.monotonic() >= float(self.pending[_UNTIL]):
            return 0.0
        return max(0.0, float(self.pending[_RESERVE]))

    def _set_reserve(self, value: float) -> None:
        if len(self.pending) > _UNTIL:
            self.pending[_RESERVE] = max(0.0, value)
            self.pending[_UNTIL] = time.monotonic() + LANE_HOLD_S if value > 1e-9 else 0.0

    def _locked(self, fn: Callable[[], Any], wait_s: float | None = None) -> Any:
        wait_s = self.LOCK_WAIT_S if wait_s is None else wait_s
        got = self.lock.acquire(timeout=wait_s)
        if not got:
            log.warning("the device's memory ledger lock was not free within %g s; reading it without", wait_s)
        try:
            return fn()
        finally:
            if got:
                self.lock.release()

    def _waiting(self) -> tuple[int, float]:
        return int(self.pending[_WAITING]), float(self.pending[_W_CLAIM])

    def _set_waiting(self, index: int, claim: float) -> None:
        self.pending[_W_CLAIM] = claim
        self.pending[_WAITING] = index

    def try_claim(self, options: Sequence[float], keep_reserve: bool = False) -> float | None:
        """Claim the first of ``options`` (the job's plans' claims, best plan first) the others leave room
        for; None otherwise (nothing claimed), and this slot becomes the one waiting, for its smallest
        option, when nobody is. While another slot's job waits for a claim ``w``, a claim is granted only
        if ``w`` still fits beside it, or if it is no more than this slot holds already (it takes no room).

        A lane job's claim (:attr:`lane`) draws on the lane's reserve first, which counts as held by it. With
        ``keep_reserve`` (a claim for the reference's set-up, before the plan's) what the claim leaves of the
        reserve stays reserved; without it (the plan's claim: what the job needs) the rest goes. A lane job's claim
        that is not granted ends the reserve (it then waits in the turnstile as any other job)."""
        def attempt() -> float | None:
            waiting, w_claim = self._waiting()
            if not self.lane and min(options) >= self.CAPACITY - 1e-9 and self.reserve() > 0.0:
                # a re-run with the whole device claimed: the reserve goes, and the turnstile holds the next large
                # job back for it. (Smaller jobs wait beside the reserve: the next large job's plan claim lets
                # what it does not need go, and one that can never fit beside it is let in when a large job gives
                # its claim back, in release.)
                self._set_reserve(0.0)
            reserve = self.reserve() if self.lane else 0.0  # (counted in others() only where it is not this job's)
            free = self.CAPACITY - self.others()  # (the reserve included, for a lane job: its own to draw on)
            if waiting not in (-1, self.index):
                free -= w_claim
            held = float(self.claims[self.index]) + reserve
            for c in options:
                # no more than this slot holds already: granted whoever waits (it takes no room from them)
                if free + 1e-9 >= c or c <= held + 1e-9:
                    self.claims[self.index] = c
                    if reserve > 0.0:
                        self._set_reserve(held - c if keep_reserve else 0.0)
                    if waiting == self.index:
                        self._set_waiting(-1, 0.0)
                    return c
            if reserve > 0.0:
                # a large job's claim the reserve and the free memory do not cover: the reserve goes, and the job
                # waits in the turnstile as without one (kept, it could hold memory neither this job nor a waiting
                # one may use until it lapsed)
                self._set_reserve(0.0)
            if waiting == -1:
                self._set_waiting(self.index, min(options))  # the running jobs give back; new ones leave room
            return None
        return self._locked(attempt)

    def claim(self, options: Sequence[float], *, wait_s: float, fallback: float,
              on_wait: Callable[[], None] | None = None, keep_reserve: bool = False) -> tuple[float, float, bool]:
        """Claim one of ``options`` for one job: see the module's description.

        Args:
            options: the claims of the job's plans, best plan first (each in [0, 1]).
            wait_s: the longest to wait; then ``fallback`` is claimed whatever the others hold.
            fallback: the claim of the plan for the fixed share.
            on_wait: called once before the first wait (the caller gives up the device's host lock then:
                a slot waiting for memory must not hold up the timing windows that let others finish).
            keep_reserve: see :meth:`try_claim`.

        Returns:
            ``(claim, waited_s, fell_back)``: this slot's claim until :meth:`release` (one of ``options``
            or ``fallback``), the seconds waited, and whether the wait ran out.

        Raises:
            ValueError: no options.
        """
        if not options:
            raise ValueError("MemoryLedger.claim: no options")
        options = [max(0.0, min(float(c), 1.0)) for c in options]
        t0 = time.monotonic()
        got = self.try_claim(options, keep_reserve)
        if got is not None:
            return got, 0.0, False
        if on_wait is not None:
            on_wait()
        end = t0 + wait_s
        while time.monotonic() < end:
            time.sleep(self.POLL_S)
            got = self.try_claim(options, keep_reserve)
            if got is not None:
                return got, time.monotonic() - t0, False

        def fall_back() -> None:
            if self._waiting()[0] == self.index:
                self._set_waiting(-1, 0.0)
            self.claims[self.index] = fallback
            self._set_reserve(0.0)  # (the fallback is taken whatever the others hold: no reserve on top)
        self._locked(fall_back)
        log.warning("no room for a claim of %.2f of the device's memory within %.0f s (the other slots hold "
                    "%.2f); planning for the fixed share 1/%d", min(options), wait_s, self.others(), len(self.claims))
        return fallback, time.monotonic() - t0, True

    def release(self, between: bool = False) -> None:
        """This slot's job is done, or gives its claim back before claiming again (``between``: a large job's
        set-up claim before its plan's): its claim (and its wait, if any) is given back. A lane job's
        (:attr:`lane`) is kept as the lane's reserve, added to what is left of it; at the end of a job, not
        where another slot's job waits for more than the device leaves beside the reserve (it goes next)."""
        def give_back() -> None:
            c = float(self.claims[self.index])
            self.claims[self.index] = 0.0
            waiting, w_claim = self._waiting()
            if waiting == self.index:
                self._set_waiting(-1, 0.0)
                waiting = -1
            if self.lane and len(self.pending) > _UNTIL:
                # at most what the other slots leave (a claim taken after its wait ran out may overcommit)
                keep = min(self.reserve() + c, self.CAPACITY - self.others())
                if not between and waiting != -1 and w_claim > self.CAPACITY - keep + 1e-9:
                    keep = 0.0  # that job could never start beside the lane (a re-run with the whole device)
                self._set_reserve(keep)
        self._locked(give_back)

    def end_lane(self) -> None:
        """End the lane's reserve (the executor, on a handle of index -1: no large job is left to run on the
        device). Waits at most :attr:`END_LANE_LOCK_WAIT_S` for the ledger's lock (a write of one number
        without it: nobody else writes the reserve while no large job runs)."""
        self._locked(lambda: self._set_reserve(0.0), wait_s=self.END_LANE_LOCK_WAIT_S)

    #: how long :meth:`end_lane` (on the executor's event loop) waits for the ledger's lock
    END_LANE_LOCK_WAIT_S = 0.2


def job_share(ledger: MemoryLedger, need: MemoryNeed, fixed_share: float, fixed_plan: Plan, *,
              wait_s: float, on_wait: Callable[[], None] | None = None, lean: bool = False) -> tuple[float, float, float]:
    """The share of the device's memory one job plans for, claimed in ``ledger`` until its
    :meth:`MemoryLedger.release`.

    A job whose best plan fits in ``fixed_share`` (1/N) plans for ``fixed_share`` (the same plan) and
    claims its need (at least :attr:`MemoryLedger.FLOOR`). A larger one is offered, best first: its best
    plan (``need.high_share``), the plan of the fixed share (``fixed_plan``) where that is better than its
    least shared one, and its least shared one (``need.low_share``); after the wait, the fixed share.
    ``lean`` (a job of the lane, :attr:`MemoryLedger.lane`): only its least shared plan where that is
    smaller than its best. The lane's jobs follow one another on the device and the other slots' jobs run
    in what they leave (H200 session 17: the device's memory bounded the sweep); a better plan for them
    (every set shared, more timing sets) would take that room for all of the lane's span.

    Returns:
        ``(share, claim, seconds waited)``.
    """
    fixed_claim = need.claim_of(fixed_plan)
    if need.high_share <= fixed_share:
        c = max(need.high_claim, ledger.FLOOR)
        got, waited, _fell = ledger.claim([c], wait_s=wait_s, fallback=c, on_wait=on_wait)
        return fixed_share, got, waited
    options = [] if lean and need.low_claim < need.high_claim else [(need.high_share, need.high_claim)]
    if fixed_plan.rank > need.low_plan.rank and not lean:
        options.append((fixed_share, fixed_claim))
    options.append((need.low_share, need.low_claim))
    got, waited, fell = ledger.claim([c for _, c in options], wait_s=wait_s, fallback=fixed_claim, on_wait=on_wait)
    if fell:
        return fixed_share, got, waited
    return next(sh for sh, c in options if c == got), got, waited


def new_state(ctx: Any, n_slots: int, lock_path: str) -> tuple[Any, Any, str]:
    """The shared state of one device's ledger for ``n_slots`` slots: ``(claims, pending, lock_path)``, the
    arrays made in the multiprocessing context ``ctx`` (pass them to each slot's :class:`MemoryLedger`)."""
    return ctx.Array("d", n_slots, lock=False), ctx.Array("d", [-1.0, 0.0, 0.0, 0.0], lock=False), lock_path


def clear_slot(claims: Any, pending: Any, index: int) -> None:
    """Give back the claim and the wait of slot ``index``, which died (called by the executor)."""
    claims[index] = 0.0
    if int(pending[_WAITING]) == index:
        pending[_W_CLAIM] = 0.0
        pending[_WAITING] = -1
