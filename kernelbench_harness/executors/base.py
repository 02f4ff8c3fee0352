"""The executor interface: where evaluation jobs run (local processes, Ray actors).

An executor owns *device slots*. A slot evaluates one candidate at a time, so timings never share
a device; the usual layout is one slot per GPU. Every method that runs work is async, so model
calls, builds and evaluations proceed concurrently in one event loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..core import EvalResult, Problem, TimingStats
from ..execution.device import EvalJob
from ..protocols import Protocol

__all__ = ["Executor", "SlotInfo"]


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
