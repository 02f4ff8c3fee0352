"""The executor interface: where evaluation jobs run (local processes, Ray actors).

An executor owns *device slots*. A slot evaluates one candidate at a time, so timings never share
a device; the usual layout is one slot per GPU. Every method that runs work is async, so model
calls, builds and evaluations proceed concurrently in one event loop.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any, Hashable, Sequence

from ..core import EvalResult, Problem, TimingStats
from ..execution.device import EvalJob
from ..protocols import Protocol

__all__ = ["Executor", "SlotInfo", "AffinityQueue"]


class AffinityQueue:
    """The free slots of an executor, handed out one job at a time; a job prefers the free slot that
    last served the same key (a problem's hash), whose device worker still holds its references.

    Large jobs (``acquire(..., large=True)``: the run's problems of at least :data:`..schedule.LANE_BYTES`)
    go one per group at a time, ahead of the others: a large job waits, without holding a slot, while
    another large job runs in its group (the slots of one GPU), and takes the next slot that frees in a
    group with none. Several slots on one GPU share its memory (the ledger), where a large job's claim is
    most of the device: two of them dispatched together held two slots, one waiting for the other's
    memory, while the ledger's turnstile held new small jobs back to leave room for it (H200 session 14: the
    cached sweep's slots waited 1,312 s for memory, 773 s of it small jobs and 501 s large ones). Now the
    large jobs run back to back, and the small ones go on beside them. The others keep their order (first
    come, first served).

    Args:
        n: number of slots (indices 0..n-1).
        groups: each slot's group (its device, say); one group for all when None.
    """

    def __init__(self, n: int, groups: Sequence[Hashable] | None = None) -> None:
        if groups is not None and len(groups) != n:
            raise ValueError(f"{len(groups)} groups for {n} slots")
        self.n = n
        self.groups: list[Hashable] = list(groups) if groups is not None else [0] * n
        self.last: dict[int, str] = {}
        self._free: list[int] = list(range(n))
        self._waiters: list[tuple[asyncio.Future[int], str, bool]] = []  # in arrival order
        self._large_in: dict[Hashable, int] = {}  # large jobs running, per group

    def large_running(self, group: Hashable | None = None) -> int:
        """Large jobs holding a slot (in ``group``; in every group when None)."""
        if group is None:
            return sum(self._large_in.values())
        return self._large_in.get(group, 0)

    async def acquire(self, key: str, large: bool = False) -> int:
        """Wait for a free slot (see the class docstring); the one that last served ``key`` if it is free.
        Give it back with :meth:`release` and the same ``large``."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiter = (fut, key, large)
        self._waiters.append(waiter)
        self._dispatch()
        try:
            return await fut
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif fut.done() and not fut.cancelled():  # handed a slot just as the waiting task was cancelled
                self.release(fut.result(), large=large)
            raise

    def release(self, i: int, key: str | None = None, large: bool = False) -> None:
        """Give slot ``i`` back (``large`` as it was acquired); ``key`` records what it now holds."""
        if key is not None:
            self.last[i] = key
        if large:
            g = self.groups[i]
            self._large_in[g] = max(0, self._large_in.get(g, 0) - 1)
        self._free.append(i)
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free slots to waiters: the first large waiter with a free slot in a group running no large
        job, else the first other waiter; among the slots it may take, the one that last served its key."""
        self._waiters = [w for w in self._waiters if not w[0].done()]  # cancelled while waiting
        while self._free and self._waiters:
            pick = None
            for w in [w for w in self._waiters if w[2]] + [w for w in self._waiters if not w[2]]:
                ok = [i for i in self._free if not (w[2] and self._large_in.get(self.groups[i]))]
                if ok:
                    pick = (w, ok)
                    break
            if pick is None:
                return  # only large waiters, and each group with a free slot runs a large job
            (fut, key, large), ok = pick
            i = next((j for j in ok if self.last.get(j) == key), ok[0])
            self._free.remove(i)
            self._waiters.remove(pick[0])
            if large:
                g = self.groups[i]
                self._large_in[g] = self._large_in.get(g, 0) + 1
            fut.set_result(i)


class SlotInfo(dict):
    """A slot's description: ``slot`` (index), ``device``, ``fingerprint`` (see hardware.py)."""


class Executor(ABC):
    """Runs evaluation jobs on device slots."""

    @property
    @abstractmethod
    def slots(self) -> list[SlotInfo]:
        """One entry per device slot."""

    @abstractmethod
    async def evaluate(self, job: EvalJob) -> EvalResult:
        """Evaluate one candidate on a free slot (prefers the slot that last held the same problem)."""

    @abstractmethod
    async def measure_baselines(self, problem: Problem, protocol: Protocol, run_seed: int,
                                modes: list[str]) -> tuple[dict[str, TimingStats], dict[str, Any], dict[str, Any]]:
        """Time the reference's baselines on a free slot: ``(stats by mode, info by mode, fingerprint)``."""

    @abstractmethod
    async def close(self) -> None:
        """Stop every slot."""

    def fingerprint(self) -> dict[str, Any]:
        """The first slot's hardware fingerprint, with each slot's in ``slots``. ``host_probe_ms`` is the
        smallest of the slots' (each measured while every slot was starting, importing torch: the least
        loaded of them comes nearest the host's own speed)."""
        fps = [s["fingerprint"] for s in self.slots]
        fp = dict(fps[0]) if fps else {}
        fp["slots"] = [{"slot": s["slot"], "device": s["device"],
                        "hardware_fingerprint": s["fingerprint"].get("hardware_fingerprint"),
                        "host_probe_ms": s["fingerprint"].get("host_probe_ms")} for s in self.slots]
        probes = [float(x["host_probe_ms"]) for x in fp["slots"] if isinstance(x["host_probe_ms"], (int, float))]
        if probes:
            fp["host_probe_ms"] = min(probes)
        return fp
