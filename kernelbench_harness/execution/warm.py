"""Warming torch.compile's on-disk caches for the baselines, in parallel with the device slots.

Compiling a reference with torch.compile costs seconds to tens of seconds per problem (PROTOCOLS.md
section 6: about 10 s of a 14 s baseline on an H200). :func:`warm_compile` compiles every problem's
reference in a pool of processes, each calling the compiled model once, so inductor's FX-graph and
Triton caches on disk are full when the device slot later compiles the same model and times it.
Nothing is timed here, but it is not idle GPU-wise: the model and inputs go to the GPU, Inductor
benchmarks Triton configs there while compiling, and the compiled model runs once. And it runs while
the device slots time: each problem's timing starts as soon as its own compile is done, while the
pool still compiles the others.

So that no timing window shares the GPU with that work, each stretch of it (moving the model and
inputs to the device; each mode's compile, first call and synchronize) holds the device's
:class:`.scratch.HostDeviceLock` **shared**, while timing windows hold it exclusively: warm-ups may
overlap each other, never a timing window, and the lock is released between modes so that a waiting
timing window gets in (the lock's turnstile keeps new warm-up stretches behind it). Each problem's
result records the seconds it waited for the lock (``_lock_wait_s``) and the wall-clock epochs of
its GPU stretches (``_gpu_windows``), to check against the timing windows' ``start``/``end``. CPU runs
take no lock and record neither. The CPU work of compiling is not kept apart from timing: it is
bounded by the cores given to the pool (see ``executors/local.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Iterator

import multiprocessing as mp

from ..core import Problem

__all__ = ["warm_compile"]

log = logging.getLogger(__name__)


def _init(device_index: str | None, threads: int) -> None:
    if device_index is not None:
        from ..hardware import visible_device_id

        # the logical index mapped through the inherited CUDA_VISIBLE_DEVICES (the run's own GPU)
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_device_id(device_index)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(threads))


def _warm_one(code: str, name: str, precision: str, modes: list[str], no_grad: bool, device: str,
              seed: int) -> dict[str, Any]:
    """Compile and call one reference in ``modes``; ``{mode: seconds or error}``, or ``{"error": ...}``
    when the model or its inputs cannot be made. On a CUDA ``device`` also ``_lock_wait_s`` (seconds
    waited for the device's lock, summed) and ``_gpu_windows`` (``[[start, end], ...]`` epochs of the
    stretches that held it shared); nothing of the kind on the CPU."""
    import types

    import torch

    from .scratch import HostDeviceLock, device_lock_key

    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    out: dict[str, Any] = {}
    gpu = device.startswith("cuda")
    lock: HostDeviceLock | None = None
    waits: list[float] = []
    windows: list[list[float]] = []

    def _lock_info() -> dict[str, Any]:
        if not gpu:
            return {}
        return {"_lock_wait_s": round(sum(waits), 3), "_gpu_windows": [list(w) for w in windows]}

    @contextlib.contextmanager
    def on_gpu() -> Iterator[None]:
        """One stretch of GPU work: the device's lock held shared, its wall-clock window recorded."""
        if lock is None:
            yield
            return
        with lock.hold(shared=True) as waited:
            waits.append(waited)
            start = time.time()
            try:
                yield
            finally:
                try:  # nothing of ours left running on the GPU once a timing window may start
                    torch.cuda.synchronize()
                except Exception:
                    pass
                windows.append([round(start, 6), round(time.time(), 6)])

    mod = types.ModuleType("kb_warm")
    try:
        if gpu:
            key = device_lock_key(device)
            lock = HostDeviceLock(key) if key else None
        exec(compile(code, name, "exec"), mod.__dict__)
        with on_gpu():
            torch.manual_seed(seed)
            model = mod.Model(*mod.get_init_inputs()).to(device)
            if dtype != torch.float32:
                model = model.to(dtype)
            torch.manual_seed(seed + 1)
            args = [a.to(device).to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else
                    (a.to(device) if isinstance(a, torch.Tensor) else a) for a in mod.get_inputs()]
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:500], **_lock_info()}
    for m in modes:
        try:
            torch._dynamo.reset()
            with on_gpu():  # released between modes: a waiting timing window gets in between
                t0 = time.perf_counter()  # the compile's own time, not the wait for the lock
                cm = torch.compile(model, mode=m)
                with (torch.no_grad() if no_grad else torch.enable_grad()):
                    cm(*args)
                if gpu:
                    torch.cuda.synchronize()
            out[m] = round(time.perf_counter() - t0, 3)
        except Exception as e:
            out[m] = f"error {type(e).__name__}: {e}"[:300]
    del model, args
    torch._dynamo.reset()
    if gpu:
        torch.cuda.empty_cache()
    out.update(_lock_info())
    return out


def warm_compile(problems: list[Problem], *, precision: str, modes: list[str], no_grad: bool,
                 device_index: str | None, workers: int, seed: int = 0,
                 timeout_s: float = 1800.0, on_done: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Compile every problem's reference with torch.compile in ``modes`` in ``workers`` processes.

    Args:
        problems: problems whose baselines are not cached yet.
        precision: run precision (``fp32``...); modes: torch.compile modes (``default``...).
        no_grad: call under ``torch.no_grad`` (as the baseline timing does).
        device_index: GPU index (as in ``CUDA_VISIBLE_DEVICES``) or None for the CPU.
        workers: processes (each limited to a few inductor compile threads).
        on_done: called (from this thread) with ``problem.key`` as soon as that problem's compile
            finished or failed, so its evaluations can start while others still compile; called for
            every problem by the time this function returns.

    Returns:
        ``{problem.key: {mode: seconds or error}}``, plus ``"_wall_s"``. On a GPU each problem's dict
        also holds ``"_lock_wait_s"`` (seconds its warm-up waited for the device's
        :class:`.scratch.HostDeviceLock`, behind timing windows) and ``"_gpu_windows"``
        (``[[start, end], ...]``, epochs of its GPU stretches, none of which overlaps a timing
        window): skip keys starting with ``_`` when reading the modes.
    """
    t0 = time.perf_counter()
    res: dict[str, Any] = {}
    if not problems or workers <= 0:
        return {"_wall_s": 0.0}
    device = "cuda:0" if device_index is not None else "cpu"
    ncpu = os.cpu_count() or 1
    threads = max(1, ncpu // max(1, workers))
    ctx = mp.get_context("spawn")
    notified: set[str] = set()

    def _notify(key: str) -> None:
        if on_done is not None and key not in notified:
            notified.add(key)
            try:
                on_done(key)
            except Exception:  # a waiter that went away must not stop the warm-up
                log.debug("warm-up on_done(%s) failed", key, exc_info=True)

    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init,
                                 initargs=(device_index, threads)) as ex:
            futs = {ex.submit(_warm_one, p.code, p.file_name, precision, modes, no_grad, device, seed): p
                    for p in problems}
            try:
                for f in as_completed(futs, timeout=timeout_s):
                    p = futs[f]
                    try:
                        res[p.key] = f.result()
                    except Exception as e:  # a worker died (segfault in a reference, say)
                        res[p.key] = {"error": f"{type(e).__name__}: {e}"[:300]}
                    _notify(p.key)
            except TimeoutError:
                log.warning("torch.compile warm-up did not finish within %.0f s; its processes are ended",
                            timeout_s)
                # a hung compile may hold the device's lock shared, which would keep every timing window
                # on the device waiting: end the pool's processes (a killed holder's flock goes with it)
                for proc in list((getattr(ex, "_processes", None) or {}).values()):
                    try:
                        proc.kill()
                    except Exception:  # noqa: BLE001 - already gone
                        pass
                ex.shutdown(wait=False, cancel_futures=True)
    finally:
        for p in problems:  # nobody waits forever on a compile that did not happen
            _notify(p.key)
    res["_wall_s"] = round(time.perf_counter() - t0, 2)
    return res
