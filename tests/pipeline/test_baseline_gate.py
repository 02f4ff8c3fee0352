"""The first candidate of a problem measures its baselines alone; once it is done, whatever its
outcome, the rest of that problem's candidates run together."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import kernelbench_harness
from kernelbench_harness import runner as runner_mod
from kernelbench_harness.core import EvalResult, Outcome
from kernelbench_harness.executors.base import Executor, SlotInfo
from kernelbench_harness.runner import RunConfig, execute_run


class _CountingExecutor(Executor):
    """Counts how many candidates of one problem are evaluated at once; every candidate fails
    (no time, so no baselines are measured), as most samples of a hard problem do."""

    def __init__(self, n_slots: int) -> None:
        self._slots = [SlotInfo(slot=i, device="cpu", fingerprint={
            "hardware_fingerprint": "hw", "software_fingerprint": "sw", "device_type": "cpu"})
            for i in range(n_slots)]
        self.active = 0
        self.peak = 0

    @property
    def slots(self):
        return self._slots

    async def evaluate(self, job):
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(0.3)
        self.active -= 1
        return EvalResult(Outcome.INCORRECT, compiled=True)

    async def measure_baselines(self, problem, protocol, run_seed, modes):
        raise AssertionError("not used")

    async def close(self):
        pass


def test_failing_candidates_of_one_problem_are_not_serialised(tmp_path, monkeypatch):
    root = Path(kernelbench_harness.__file__).resolve().parents[1]
    code = (root / "problems" / "solutions" / "level1" / "2_Row_Softmax.triton.py").read_text()
    gens = tmp_path / "gens.jsonl"
    gens.write_text("".join(json.dumps({"level": 1, "problem_id": 2, "model": "m", "sample_id": i, "code": code})
                            + "\n" for i in range(4)))
    ex = _CountingExecutor(4)
    monkeypatch.setattr(runner_mod, "_make_executor", lambda cfg, cache: ex)
    cfg = RunConfig(model=f"replay:{gens}", levels=(1,), ids="2", run_name="ser", db=f"sqlite:///{tmp_path / 'k.db'}",
                    build_cache=str(tmp_path / "cache"), gpus="cpu", warm_workers=0)
    asyncio.run(execute_run(cfg))
    # four slots, four candidates of one problem, none of which can ever yield a baseline: after the
    # first one, the other three run together (a lock held until baselines exist ran them one by one)
    assert ex.peak == 3, f"candidates were evaluated one at a time (peak {ex.peak}) on 4 free slots"
