"""Local executor: one trusted device-worker process per device slot on this host.

Each slot is a process (``multiprocessing`` spawn context) that sees exactly one GPU
(``CUDA_VISIBLE_DEVICES``) or the CPU, holds a :class:`~..execution.device.DeviceEvaluator`, and runs
one job at a time. A slot whose process dies (a fault in the trusted reference, say) is restarted
and the job in flight becomes that candidate's ``runtime_error``; the run goes on.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import os
import threading
import traceback
from typing import Any

from ..core import EvalResult, Outcome, Problem, TimingStats
from ..errors import PrerequisiteError
from ..execution.device import EvalJob
from ..protocols import Protocol
from .base import AffinityQueue, Executor, SlotInfo

__all__ = ["LocalExecutor", "resolve_devices"]

log = logging.getLogger(__name__)


def resolve_devices(spec: str | None, *, cpu_ok: bool = True) -> list[str]:
    """Device slots from a ``--gpus`` spec.

    Args:
        spec: None/"auto" (every visible GPU, else the CPU), "cpu", or GPU indices "0,1". An index may
            repeat ("0,0", "cpu,cpu"): several slots on one device overlap their references, builds
            and correctness checks, but take turns to time (one lock per physical device).

    Returns:
        Slot devices like ``["cuda:0", "cuda:1"]`` or ``["cpu"]``.

    Raises:
        PrerequisiteError: GPUs requested where none is visible.
    """
    if spec in (None, "", "auto"):
        n = _gpu_count()
        return [f"cuda:{i}" for i in range(n)] if n else (["cpu"] if cpu_ok else [])
    parts = [s.strip() for s in str(spec).split(",") if s.strip()]
    if parts and all(p == "cpu" for p in parts):
        return ["cpu"] * len(parts)  # "cpu,cpu": two slots sharing the CPU, timing in turn
    idx = parts
    if not all(i.isdigit() for i in idx):
        raise PrerequisiteError(f"bad --gpus value {spec!r}", fix="use GPU indices like 0,1 or 'cpu'")
    n = _gpu_count()
    if n == 0:
        raise PrerequisiteError("GPUs were requested but no CUDA GPU is visible",
                                fix="run on a GPU machine, or use --gpus cpu")
    bad = [i for i in idx if int(i) >= n]
    if bad:
        raise PrerequisiteError(f"GPU index {bad[0]} does not exist ({n} visible)", fix=f"use indices 0..{n - 1}")
    return [f"cuda:{i}" for i in idx]


def _gpu_count() -> int:
    """Number of CUDA GPUs, asked in a child process so this process never initialises CUDA."""
    env_cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env_cvd is not None and env_cvd.strip() in ("", "-1"):
        return 0
    try:
        import torch

        if not torch.backends.cuda.is_built():
            return 0
    except Exception:
        return 0
    import subprocess
    import sys

    try:
        out = subprocess.run([sys.executable, "-c", "import torch;print(torch.cuda.device_count())"],
                             capture_output=True, text=True, timeout=120)
        return int(out.stdout.strip() or 0)
    except (subprocess.SubprocessError, ValueError, OSError):
        return 0


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (a killed runner leaves no slot behind)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _slot_main(conn: Any, device: str, options: dict[str, Any], timing_lock: Any = None) -> None:
    """Device-worker process: owns one device, serves jobs until told to stop."""
    _die_with_parent()
    from ..execution.sandbox import make_undumpable

    make_undumpable()
    if device.startswith("cuda:"):
        os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
        dev = "cuda:0"
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        dev = "cpu"
    import logging as _logging

    _logging.basicConfig(level=options.get("log_level", _logging.WARNING),
                         format=f"%(levelname)s [{device}] %(name)s: %(message)s")
    from ..execution.device import DeviceEvaluator

    ev = DeviceEvaluator(dev, scratch_dir=options.get("scratch_dir"), build_cache=options.get("build_cache"),
                         start_method=options.get("start_method", "zygote"),
                         memory_limit_bytes=options.get("memory_limit_bytes"), sandbox=options.get("sandbox", True),
                         timing_lock=timing_lock, physical_device=device)
    fp = ev.fingerprint()
    fp["slot_device"] = device
    conn.send(("ready", fp))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        kind = msg[0]
        try:
            if kind == "stop":
                break
            if kind == "evaluate":
                job: EvalJob = msg[1]
                conn.send(("ok", ev.evaluate(job).to_dict()))
            elif kind == "baselines":
                problem, protocol, seed, modes = msg[1:]
                stats = ev.measure_baselines(problem, protocol, seed, modes)
                info = ev.context(problem, protocol, seed).baseline_info
                conn.send(("ok", ({m: s.to_dict() for m, s in stats.items()},
                                  {m: info.get(m) for m in modes}, ev.fingerprint())))
            else:
                conn.send(("error", f"unknown request {kind!r}"))
        except Exception:
            conn.send(("error", traceback.format_exc()))
    ev.close()


class _Slot:
    def __init__(self, index: int, device: str, options: dict[str, Any], timing_lock: Any) -> None:
        self.index = index
        self.device = device
        self.options = options
        self.timing_lock = timing_lock
        self.lock = threading.Lock()
        self.fingerprint: dict[str, Any] = {}
        self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_slot_main, args=(child, self.device, self.options, self.timing_lock),
                                name=f"kbench-slot{self.index}", daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(600):
            raise PrerequisiteError(f"device worker for {self.device} did not start within 10 minutes")
        try:
            tag, fp = self.conn.recv()
        except EOFError:
            raise PrerequisiteError(f"device worker for {self.device} died while starting "
                                    f"(exit code {self.proc.exitcode})", fix="run with -vv to see its log") from None
        self.fingerprint = fp

    def call(self, msg: tuple[Any, ...]) -> tuple[str, Any]:
        """Send a request and wait for the answer; restart the worker if it died."""
        with self.lock:
            try:
                self.conn.send(msg)
                return self.conn.recv()
            except (EOFError, OSError, BrokenPipeError) as e:
                code = self.proc.exitcode
                log.error("device worker %s died (exit code %s); restarting", self.device, code)
                try:
                    self.proc.kill()
                except Exception:
                    pass
                self._start()
                return ("died", f"device worker died (exit code {code}): {e}")

    def stop(self) -> None:
        with self.lock:
            try:
                self.conn.send(("stop",))
            except Exception:
                pass
            self.proc.join(timeout=30)
            if self.proc.is_alive():
                self.proc.kill()


class LocalExecutor(Executor):
    """Device slots as local processes.

    Args:
        devices: slot devices from :func:`resolve_devices` (``["cuda:0", "cuda:1"]`` or ``["cpu"]``).
        options: passed to each :class:`~..execution.device.DeviceEvaluator` (``scratch_dir``,
            ``build_cache``, ``start_method``, ``memory_limit_bytes``, ``sandbox``, ``log_level``).
    """

    def __init__(self, devices: list[str], options: dict[str, Any] | None = None) -> None:
        self.options = dict(options or {})
        ctx = mp.get_context("spawn")
        locks = {d: ctx.Lock() for d in devices}  # one timing lock per physical device
        self._slots = [_Slot(i, d, self.options, locks[d]) for i, d in enumerate(devices)]
        self._free = AffinityQueue(len(self._slots))

    @property
    def slots(self) -> list[SlotInfo]:
        return [SlotInfo(slot=s.index, device=s.device, fingerprint=s.fingerprint) for s in self._slots]

    async def _call(self, key: str, msg: tuple[Any, ...]) -> tuple[_Slot, str, Any]:
        i = await self._free.acquire(key)
        slot = self._slots[i]
        done = False
        try:
            tag, payload = await asyncio.to_thread(slot.call, msg)
            done = True
        finally:
            self._free.release(i, key if done else None)
        return slot, tag, payload

    async def evaluate(self, job: EvalJob) -> EvalResult:
        slot, tag, payload = await self._call(job.problem.code_sha256, ("evaluate", job))
        if tag == "ok":
            return EvalResult.from_dict(payload)
        return EvalResult(Outcome.RUNTIME_ERROR, error=f"harness error on {slot.device}: {payload}"[:8000],
                          device=slot.device, extra={"harness_error": True})

    async def measure_baselines(self, problem: Problem, protocol: Protocol, run_seed: int,
                                modes: list[str]) -> tuple[dict[str, TimingStats], dict[str, Any], dict[str, Any]]:
        slot, tag, payload = await self._call(problem.code_sha256, ("baselines", problem, protocol, run_seed, modes))
        if tag != "ok":
            raise RuntimeError(f"baseline measurement failed on {slot.device}: {payload}")
        stats, info, fp = payload
        return {m: TimingStats.from_dict(s) for m, s in stats.items()}, info, fp  # type: ignore[misc]

    async def close(self) -> None:
        await asyncio.gather(*(asyncio.to_thread(s.stop) for s in self._slots))
