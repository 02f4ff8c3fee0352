"""The executor interface: where evaluation jobs run (local processes, Ray actors).

An executor owns *device slots*. A slot evaluates one candidate at a time, so timings never share
a device; the usual layout is one slot per GPU. Every method that runs work is async, so model
calls, builds and evaluations proceed concurrently in one event loop.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any

from ..core import EvalResult, Problem, TimingStats
from ..execution.device import EvalJob
from ..protocols import Protocol

__all__ = ["Executor", "SlotInfo", "AffinityQueue"]


class AffinityQueue:
    """The free slots of an executor, handed out one job at a time; a job prefers the free slot that
    last served the same key (a problem's hash), whose device worker still holds its references.

    Args:
        n: number of slots (indices 0..n-1).
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self._q: asyncio.Queue[int] | None = None
        self.last: dict[int, str] = {}

    def _queue(self) -> "asyncio.Queue[int]":
        if self._q is None:  # created inside the running event loop
            self._q = asyncio.Queue()
            for i in range(self.n):
                self._q.put_nowait(i)
        return self._q

    async def acquire(self, key: str) -> int:
        """Wait for a free slot; the one that last served ``key`` if it is free."""
        q = self._queue()
        i = await q.get()
        if self.last.get(i) != key and not q.empty():
            others = [q.get_nowait() for _ in range(q.qsize())]
            match = next((j for j in others if self.last.get(j) == key), None)
            if match is not None:
                others.remove(match)
                others.append(i)
                i = match
            for j in others:
                q.put_nowait(j)
        return i

    def release(self, i: int, key: str | None = None) -> None:
        """Give slot ``i`` back; ``key`` records what it now holds."""
        if key is not None:
            self.last[i] = key
        self._queue().put_nowait(i)


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
        """The first slot's hardware fingerprint, with ``device_count`` = number of slots' devices."""
        fps = [s["fingerprint"] for s in self.slots]
        fp = dict(fps[0]) if fps else {}
        fp["slots"] = [{"slot": s["slot"], "device": s["device"],
                        "hardware_fingerprint": s["fingerprint"].get("hardware_fingerprint")} for s in self.slots]
        return fp
