"""Ray executor: device slots as Ray actors, one per GPU of a cluster (``num_gpus=1`` each).

Each actor holds a :class:`~..execution.device.DeviceEvaluator` for the GPU Ray gave it, so every
timing has its GPU to itself; results come back to the driver, which alone writes the store. With no
``--ray-address`` a local Ray instance is started (on a CPU-only machine: one CPU actor, or as many
as ``--gpus cpu,cpu`` names). On a remote cluster the package is shipped with the job
(``runtime_env.py_modules``) unless ``KBENCH_RAY_SHIP_CODE=0`` says the nodes have it installed.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..core import EvalResult, Outcome, Problem, TimingStats
from ..errors import PrerequisiteError
from ..execution.device import EvalJob
from ..protocols import Protocol
from .base import AffinityQueue, Executor, SlotInfo

__all__ = ["RayExecutor"]

log = logging.getLogger(__name__)


class _DeviceActor:
    """Body of the Ray actor (wrapped with ``ray.remote`` at run time, so Ray stays an optional import)."""

    def __init__(self, device: str, options: dict[str, Any]) -> None:
        from ..execution.device import DeviceEvaluator

        self.ev = DeviceEvaluator(device, scratch_dir=options.get("scratch_dir"),
                                  build_cache=options.get("build_cache"),
                                  start_method=options.get("start_method", "zygote"),
                                  memory_limit_bytes=options.get("memory_limit_bytes"),
                                  sandbox=options.get("sandbox", True), physical_device=options.get("label"))

    def fingerprint(self) -> dict[str, Any]:
        fp = dict(self.ev.fingerprint())
        fp["ray_node"] = os.uname().nodename
        return fp

    def evaluate(self, job: EvalJob) -> dict[str, Any]:
        return self.ev.evaluate(job).to_dict()

    def baselines(self, problem: Problem, protocol: Protocol, seed: int, modes: list[str]) -> tuple[Any, Any, Any]:
        stats, info = self.ev.baselines_with_info(problem, protocol, seed, modes)
        return {m: s.to_dict() for m, s in stats.items()}, info, self.fingerprint()

    def close(self) -> None:
        self.ev.close()


class RayExecutor(Executor):
    """Device slots as Ray actors.

    Args:
        address: a Ray cluster address (``ray://host:10001`` or ``auto``); None starts a local instance.
        gpus: None (one actor per GPU in the cluster, or one CPU actor when it has none), ``"cpu"`` /
            ``"cpu,cpu"`` (that many CPU actors), or a count of GPUs as ``"0,1"`` (two GPU actors).
        options: as for :class:`~.local.LocalExecutor`.

    Raises:
        ConfigError: ``gpus`` is not a ``--gpus`` value (:func:`~kernelbench_harness.executors.parse_gpus`).
        PrerequisiteError: Ray is not installed, or the cluster cannot be reached.
    """

    def __init__(self, address: str | None = None, gpus: str | None = None,
                 options: dict[str, Any] | None = None) -> None:
        from . import parse_gpus

        spec = parse_gpus(gpus)  # before Ray starts: "" was every GPU of the cluster, "auto" one GPU slot
        try:
            import ray
        except ImportError:
            raise PrerequisiteError("the Ray executor needs the `ray` package",
                                    fix="pip install 'kernelbench-harness[ray]'") from None
        self.ray = ray
        self._owns_ray = False
        if not ray.is_initialized():
            kw: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False, "include_dashboard": False}
            if address:
                kw["address"] = address
                if os.environ.get("KBENCH_RAY_SHIP_CODE", "1") != "0":
                    kw["runtime_env"] = {"py_modules": [str(Path(__file__).resolve().parents[1])]}
            else:
                kw["num_cpus"] = max(2, os.cpu_count() or 2)
            try:
                ray.init(**kw)
            except Exception as e:
                raise PrerequisiteError(f"cannot start or reach Ray ({e})",
                                        fix="check --ray-address, or start a cluster with `ray start --head`") from None
            self._owns_ray = True
        res = ray.cluster_resources()
        n_gpu = int(res.get("GPU", 0))
        parts = [] if spec in (None, "auto") else spec.split(",")
        if parts and all(p == "cpu" for p in parts):
            devices = ["cpu"] * len(parts)
        elif parts:
            if n_gpu < len(parts):
                raise PrerequisiteError(f"{len(parts)} GPU slots requested, the Ray cluster has {n_gpu} GPU(s)",
                                        fix="ask for fewer with --gpus, or add GPU nodes")
            devices = ["cuda"] * len(parts)
        else:
            devices = ["cuda"] * n_gpu if n_gpu else ["cpu"]
        opts = dict(options or {})
        actor_cls = ray.remote(_DeviceActor)
        self._actors = []
        for i, d in enumerate(devices):
            o = {**opts, "label": f"ray-slot{i}:{d}"}
            if d == "cuda":
                a = actor_cls.options(num_gpus=1, num_cpus=1).remote("cuda:0", o)
            else:
                a = actor_cls.options(num_gpus=0, num_cpus=1).remote("cpu", o)
            self._actors.append(a)
        fps = ray.get([a.fingerprint.remote() for a in self._actors], timeout=900)
        self._slots = [SlotInfo(slot=i, device=f"ray:{fp.get('ray_node')}:{devices[i]}", fingerprint=fp)
                       for i, fp in enumerate(fps)]
        self._free = AffinityQueue(len(self._actors))

    @property
    def slots(self) -> list[SlotInfo]:
        return list(self._slots)

    async def evaluate(self, job: EvalJob) -> EvalResult:
        key = job.problem.code_sha256
        i = await self._free.acquire(key)
        done = False
        try:
            payload = await self._actors[i].evaluate.remote(job)
            done = True
        except Exception as e:  # the actor died (node lost, fault in the trusted side)
            log.error("Ray slot %d failed: %s", i, e)
            return EvalResult(Outcome.RUNTIME_ERROR, error=f"harness error on Ray slot {i}: {e}"[:8000],
                              device=self._slots[i]["device"], extra={"harness_error": True})
        finally:
            self._free.release(i, key if done else None)
        return EvalResult.from_dict(payload)

    async def measure_baselines(self, problem: Problem, protocol: Protocol, run_seed: int,
                                modes: list[str]) -> tuple[dict[str, TimingStats], dict[str, Any], dict[str, Any]]:
        key = problem.code_sha256
        i = await self._free.acquire(key)
        done = False
        try:
            stats, info, fp = await self._actors[i].baselines.remote(problem, protocol, run_seed, modes)
            done = True
        finally:
            self._free.release(i, key if done else None)
        return {m: TimingStats.from_dict(s) for m, s in stats.items()}, info, fp  # type: ignore[misc]

    async def close(self) -> None:
        for a in self._actors:
            try:
                await a.close.remote()
            except Exception:
                pass
        if self._owns_ray:
            self.ray.shutdown()
