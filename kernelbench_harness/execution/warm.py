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
inputs to the device; each run of a compiled graph, with the Triton autotuning its first run does;
Inductor's own benchmarks while compiling) holds the device's :class:`.scratch.HostDeviceLock`
**shared**, while timing windows hold it exclusively: warm-ups may overlap each other, never a timing
window. Tracing and code generation, the seconds to minutes of host work in a compile, hold nothing
(see :func:`_compile_gated`): holding the lock through them kept timing windows waiting behind seven
compiles at once (H200, session 9: 4 level-2/3 problems in 354 s). A waiting timing window gets in at
the next release (the lock's turnstile keeps new warm-up stretches behind it). Each problem's
result records the seconds it waited for the lock (``_lock_wait_s``) and the wall-clock epochs of
its GPU stretches (``_gpu_windows``), to check against the timing windows' ``start``/``end``. CPU runs
take no lock and record neither. The CPU work of compiling is not kept apart from timing: it is
bounded by the cores given to the pool (see ``executors/local.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Iterator

import multiprocessing as mp

from ..core import Problem
from .scratch import HostDeviceLock

__all__ = ["warm_compile", "compile_threads", "available_cpus", "stable_compile_cache_keys"]

log = logging.getLogger(__name__)

#: how deep this process is inside a stretch that holds the device's lock: one count per process, so a
#: stretch entered from inside another (a benchmark during a graph's run) never takes the lock twice
_GATE_DEPTH = [0]
#: held by the thread inside such a stretch: a second thread waits instead of taking the lock through the
#: same handle (or running unlocked beside it)
_GATE_MUTEX = threading.RLock()


def _init(device_index: str | None, threads: int) -> None:
    import faulthandler
    import signal

    # ``kill -USR1 <pid>`` prints every thread's stack to the run's log: which warm-up holds the device's
    # lock, and where (see /proc/locks for the holders of $TMPDIR/kbench-locks/*.lock)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if device_index is not None:
        from ..hardware import visible_device_id

        # the logical index mapped through the inherited CUDA_VISIBLE_DEVICES (the run's own GPU)
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_device_id(device_index)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(threads))


def stable_compile_cache_keys() -> None:
    """Make inductor's FX-graph cache key of a compile the same in every process, so that the device slot's
    compile of a reference finds what the warm-up process stored for it.

    The key pickles each input's metadata, memory format included. A ``torch.memory_format`` pickles as a bare
    name, ``torch.contiguous_format``, which :mod:`pickle` resolves by scanning ``sys.modules`` for the first
    module with a global ``torch``: ``torch._utils`` in one process, ``__mp_main__`` in a warm-up process
    (spawned, its main module re-imported under that name). The bytes, and the key, then differed between the
    two processes and every slot's compile missed the cache (CPU, torch 2.13: a warm-up then the slot's
    baseline, 0 hits and 1 miss; ``scripts/compile_cache_check.py``). Registered here with :mod:`copyreg`,
    it pickles as :func:`memory_format_named` ``("contiguous_format")`` everywhere: the same value when
    unpickled, and the same bytes in each process. Idempotent; call it before compiling."""
    import copyreg

    import torch

    if copyreg.dispatch_table.get(torch.memory_format) is not _reduce_memory_format:
        copyreg.pickle(torch.memory_format, _reduce_memory_format)


def memory_format_named(name: str) -> Any:
    """``torch.<name>`` (a ``torch.memory_format``): what :func:`_reduce_memory_format`'s pickles load as."""
    import torch

    fmt = getattr(torch, name)
    if not isinstance(fmt, torch.memory_format):
        raise ValueError(f"torch.{name} is not a memory format")
    return fmt


def _reduce_memory_format(fmt: Any) -> tuple[Any, tuple[str]]:
    # a function named by its module (which pickle writes as is) and a string: both pickle to the same bytes
    # in every process (the torch module itself would not pickle, and the cache would be bypassed)
    return memory_format_named, (str(fmt).rsplit(".", 1)[-1],)


def _warm_one(code: str, name: str, precision: str, modes: list[str], no_grad: bool, device: str,
              seed: int, tf32: bool | None = None) -> dict[str, Any]:
    """Compile and call one reference in ``modes``; ``{mode: seconds or error}``, or ``{"error": ...}``
    when the model or its inputs cannot be made. On a CUDA ``device`` also ``_lock_wait_s`` (seconds
    waited for the device's lock, summed) and ``_gpu_windows`` (``[[start, end], ...]`` epochs of the
    stretches that held it shared); nothing of the kind on the CPU."""
    import types

    import torch

    from .guards import apply_tf32
    from .scratch import device_lock_key

    # the TF32 switches the device slot sets before its own compile (DeviceEvaluator): inductor's FX-graph cache
    # key holds the matmul precision, which apply_tf32 sets ("ieee") where a fresh process has "none"; without
    # this, every slot's compile missed the cache this warm-up filled (H200 session 22: L3/16 compiled in
    # 131.9 s here, then in 94.4 s in the slot)
    apply_tf32(tf32)
    stable_compile_cache_keys()
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
        """One stretch of GPU work: the device's lock held shared, its wall-clock window recorded. One
        thread at a time (another thread's stretch waits for this one), and a stretch entered inside
        another in the same thread takes nothing more."""
        if lock is None:
            yield
            return
        with _GATE_MUTEX:
            if _GATE_DEPTH[0]:  # nested (a benchmark inside a compiled graph's run): held already
                yield
                return
            _GATE_DEPTH[0] += 1
            try:
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
            finally:
                _GATE_DEPTH[0] -= 1

    mod = types.ModuleType("kb_warm")
    alone = contextlib.ExitStack()
    try:
        key = device_lock_key(device) if gpu else None
        if key:
            lock = HostDeviceLock(key)
        exec(compile(code, name, "exec"), mod.__dict__)
        # the model is made on the host, holding nothing
        torch.manual_seed(seed)
        model = mod.Model(*mod.get_init_inputs())
        if key and meta_input_nbytes(torch, mod) >= BIG_INPUT_BYTES:
            # before drawing them: warm-ups with GiB of inputs run one at a time on the device
            out["_alone_wait_s"] = alone.enter_context(_alone_on_device(key))
        torch.manual_seed(seed + 1)

        def placed(m: Any, vals: list[Any]) -> tuple[Any, list[Any]]:
            """The model and inputs on the device, floating ones at the run's precision."""
            m = m.to(device)
            if dtype != torch.float32:
                m = m.to(dtype)
            return m, [a.to(device).to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else
                       (a.to(device) if isinstance(a, torch.Tensor) else a) for a in vals]
        args: list[Any] | None = None
        if gpu:
            # a compile depends on the inputs' shapes and dtypes, not their values: drawn on the device
            # (milliseconds for GiB, where the host took seconds to tens of seconds, with a device lock held
            # meanwhile keeping timing windows waiting: H200 session 10, 15-40 s stretches)
            try:
                with on_gpu(), torch.device(device):
                    model, args = placed(model, list(mod.get_inputs()))
                out["_inputs_drawn_on"] = "device"
            except Exception:  # noqa: BLE001 - a get_inputs that needs the host: drawn there below
                args = None
        if args is None:
            host_args = list(mod.get_inputs())  # on the host, holding nothing
            if key and "_alone_wait_s" not in out and tensor_nbytes(torch, host_args) >= BIG_INPUT_BYTES:
                out["_alone_wait_s"] = alone.enter_context(_alone_on_device(key))  # meta tensors could not tell
            with on_gpu():
                model, args = placed(model, host_args)
            del host_args
    except Exception as e:
        alone.close()
        return {"error": f"{type(e).__name__}: {e}"[:500], **_lock_info()}
    gated = gpu and lock is not None
    ungate = _gate_benchmarks(torch, on_gpu) if gated else (lambda: None)
    try:
        _compile_modes(torch, model, args, modes, no_grad, gpu, gated, on_gpu, waits, out)
    finally:
        ungate()
        alone.close()
    del model, args
    torch._dynamo.reset()
    if gpu:
        torch.cuda.empty_cache()
    out.update(_lock_info())
    return out


#: a warm-up whose inputs take at least this many bytes runs alone among the warm-ups on its device (see
#: :func:`_alone_on_device`)
BIG_INPUT_BYTES = 1 << 30


def meta_input_nbytes(torch: Any, mod: Any) -> int:
    """Bytes of the tensors the problem module's ``get_inputs()`` returns, drawn as meta tensors (no
    memory, no random numbers); -1 when that fails (a problem that builds its inputs some other way)."""
    try:
        with torch.device("meta"):
            return tensor_nbytes(torch, mod.get_inputs())
    except Exception:  # noqa: BLE001 - the caller measures the real inputs instead
        return -1


def meta_weight_nbytes(torch: Any, mod: Any) -> int:
    """Bytes of the parameters and buffers of the problem module's ``Model(*get_init_inputs())``, built on
    meta tensors (no memory, no random numbers); 0 when that fails or the model is no module."""
    try:
        with torch.device("meta"):
            model = mod.Model(*mod.get_init_inputs())
        return module_nbytes(torch, model)
    except Exception:  # noqa: BLE001 - measured when the context is set up instead
        return 0


def module_nbytes(torch: Any, model: Any, device_only: bool = False) -> int:
    """Bytes of a module's parameters and buffers, each counted once (0 for what is no module);
    ``device_only``: those on a CUDA device only."""
    if not isinstance(model, torch.nn.Module):
        return 0
    seen = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    return sum(t.numel() * t.element_size() for t in seen.values() if t.is_cuda or not device_only)


def tensor_nbytes(torch: Any, vals: Any) -> int:
    """Bytes of the tensors among ``vals`` (a flat list of values: a problem's inputs or outputs)."""
    return sum(t.numel() * t.element_size() for t in vals if isinstance(t, torch.Tensor))


def warm_big_lock(key: str) -> HostDeviceLock:
    """The large-warm-up lock of the device ``key`` (:func:`.scratch.device_lock_key`): a
    :class:`.scratch.HostDeviceLock` of its own (``$TMPDIR/kbench-locks/<key>.warm-big.lock``), taken
    exclusively, never the device's timing lock."""
    return HostDeviceLock(f"{key}.warm-big")


@contextlib.contextmanager
def _alone_on_device(key: str) -> Iterator[float]:
    """Hold the device's large-warm-up lock (:func:`warm_big_lock`) for one problem's warm-up; yields the
    seconds waited for it. Current KernelBench level 1 has 60 problems whose inputs take 1-16 GiB: eight
    warm-up processes each holding a model, its inputs and its outputs of that size on the device beside
    the slots' own sets could run it out of memory. Nothing here keeps a timing window waiting."""
    with warm_big_lock(key).hold() as waited:
        yield round(waited, 3)


def _compile_modes(torch: Any, model: Any, args: list[Any], modes: list[str], no_grad: bool, gpu: bool,
                   gated: bool, on_gpu: Callable[[], Any], waits: list[float], out: dict[str, Any]) -> None:
    """Compile and call ``model`` once per torch.compile mode, recording each mode's seconds (without
    the waits for the device's lock) or its error in ``out``."""
    for m in modes:
        try:
            torch._dynamo.reset()
            waited0 = sum(waits)
            t0 = time.perf_counter()
            cm = _compile_gated(torch, model, m, on_gpu) if gated else None
            if cm is not None:
                try:
                    with (torch.no_grad() if no_grad else torch.enable_grad()):
                        cm(*args)  # compiles here, outside the lock; runs its one graph inside it
                except Exception:  # noqa: BLE001 - a graph break (eager code between graphs would run
                    cm = None      # unlocked) or a failure: compiled again below, all of it locked
                    torch._dynamo.reset()
            if cm is None:  # no lock to take, no inductor wrapper to extend, or not one whole graph
                with on_gpu():  # the whole compile in one stretch, released between modes
                    cm = torch.compile(model, mode=m)
                    with (torch.no_grad() if no_grad else torch.enable_grad()):
                        cm(*args)
                    if gpu:
                        torch.cuda.synchronize()
            out[m] = round(time.perf_counter() - t0 - (sum(waits) - waited0), 3)  # not the waits for the lock
        except Exception as e:
            out[m] = f"error {type(e).__name__}: {e}"[:300]


def _compile_gated(torch: Any, model: Any, mode: str, gate: Callable[[], Any]) -> Any:
    """``torch.compile(model, mode=mode, fullgraph=True)`` whose compiled graph runs inside ``gate()``
    (the device's lock held shared), while tracing and Inductor's code generation, which are host work
    taking seconds to minutes, run outside it. None where this torch lacks the inductor wrapper to
    extend. Calling it raises where the model is not one graph.

    The backend is torch's own inductor wrapper (``torch._TorchCompileInductorWrapper``) for ``mode``,
    so the graph, the Inductor config and therefore the FX-graph and Triton cache entries written here
    are the ones the device slot's plain ``torch.compile(model, mode=mode)`` looks up; only the call of
    each compiled graph is wrapped (with the graph's calling convention kept)."""
    import functools

    base = getattr(torch, "_TorchCompileInductorWrapper", None)
    if base is None:
        return None

    class _Gated(base):  # type: ignore[misc, valid-type]
        def __call__(self, model_: Any, inputs_: Any, **kw: Any) -> Any:
            compiled = super().__call__(model_, inputs_, **kw)

            @functools.wraps(compiled)  # keeps _boxed_call: dynamo calls boxed graphs with one list
            def run(*a: Any, **k: Any) -> Any:
                with gate():
                    return compiled(*a, **k)
            return run

    try:
        backend = _Gated(mode, None, None)
    except TypeError:  # another constructor signature
        return None
    backend.__name__ = "inductor"  # torch.compile names a callable backend by __name__
    # one whole graph, or an error: with graph breaks, the eager code between graphs would run on the
    # GPU outside the lock (the caller then compiles the plain way, all of it locked)
    return torch.compile(model, backend=backend, fullgraph=True)


def _gate_benchmarks(torch: Any, gate: Callable[[], Any]) -> Callable[[], None]:
    """Inductor's own GPU benchmarks (``shape_padding``'s matmul timings while compiling, the Triton
    autotuning of a compiled graph's first run) run inside ``gate()`` too: patched on this warm-up
    process's benchmarker for one problem. Returns the undo, to call when that problem is done.

    The patch must not outlive the problem: a later problem's graph run holds the lock through its own
    gate, and a benchmark inside it that went through an earlier problem's gate would take the lock a
    second time through another handle, wait at the turnstile behind a waiting timing window, and hold
    the device forever (H200, session 9: a level-2/3 sweep stuck for 540 s)."""
    try:
        from torch._inductor.runtime import benchmarking
    except Exception:  # noqa: BLE001 - no benchmarker in this torch: nothing to gate
        return lambda: None
    b = getattr(benchmarking, "benchmarker", None)
    undo: list[Callable[[], None]] = []
    for name in ("benchmark_gpu", "benchmark_gpu_with_cuda_graph"):
        fn = getattr(b, name, None)
        if fn is None:
            continue
        had = name in vars(b)  # an instance attribute of its own (else the class's method)

        def gated(*a: Any, _fn: Any = fn, **k: Any) -> Any:
            with gate():
                return _fn(*a, **k)
        setattr(b, name, gated)

        def restore(_name: str = name, _fn: Any = fn, _had: bool = had) -> None:
            if _had:
                setattr(b, _name, _fn)
            else:
                vars(b).pop(_name, None)
        undo.append(restore)

    def undo_all() -> None:
        for u in undo:
            u()
    return undo_all


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity: the executor keeps the timing slots' cores apart)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


#: inductor's own cap on its compile threads (``torch._inductor.config.decide_compile_threads``: at most 32)
MAX_COMPILE_THREADS = 32


def compile_threads(available: int, workers: int) -> int:
    """Inductor compile threads (``TORCHINDUCTOR_COMPILE_THREADS``) for each of ``workers`` warm-up processes
    sharing ``available`` CPUs.

    Each process gets twice its share, up to all of them. A process spends much of a compile in its own
    single-threaded tracing and lowering, its compile threads idle, and uses them in bursts (a graph's
    kernels, all at once). With one share each, the last compile of a run, or a run's only one, used 2 of 16
    cores while the others stood idle: L3/16 (DenseNet201) did not finish its warm-up in 275 s on an H200's
    host (session 20). Oversubscribing stays on the CPUs the warm-up may use (where the executor pins the
    timing slots, not theirs); the cap bounds inductor's compile processes to twice those CPUs, and each
    process's to inductor's own cap (:data:`MAX_COMPILE_THREADS`).

    Args:
        available: CPUs the warm-up processes may run on (>= 1).
        workers: warm-up processes (>= 1).

    Returns:
        Threads per process, between 1 and ``min(available, 32)``.
    """
    return max(1, min(MAX_COMPILE_THREADS, available, (2 * available) // max(1, workers)))


def warm_compile(problems: list[Problem], *, precision: str, modes: list[str], no_grad: bool,
                 device_index: str | None, workers: int, seed: int = 0, tf32: bool | None = None,
                 timeout_s: float = 1800.0, on_done: Callable[[str], None] | None = None,
                 results: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compile every problem's reference with torch.compile in ``modes`` in ``workers`` processes.

    Args:
        problems: problems whose baselines are not cached yet.
        precision: run precision (``fp32``...); modes: torch.compile modes (``default``...).
        no_grad: call under ``torch.no_grad`` (as the baseline timing does).
        tf32: the protocol's TF32 policy (:func:`.guards.apply_tf32`), set as the device slot sets it, so that
            the slot's compile finds what this one stored (the cache key holds the matmul precision).
        device_index: GPU index (as in ``CUDA_VISIBLE_DEVICES``) or None for the CPU.
        workers: processes (each limited to a few inductor compile threads).
        on_done: called (from this thread) with ``problem.key`` as soon as that problem's compile
            finished or failed, so its evaluations can start while others still compile; called for
            every problem by the time this function returns.
        results: the dict to fill and return (default: a new one), entry by entry as each problem
            finishes, so a caller cut short (Ctrl-C, a budget) still has the problems compiled so far.

    Returns:
        ``{problem.key: {mode: seconds or error}}``, plus ``"_wall_s"`` and ``"_compile_threads"`` (each
        process's inductor compile threads, :func:`compile_threads`). On a GPU each problem's dict
        also holds ``"_lock_wait_s"`` (seconds its warm-up waited for the device's
        :class:`.scratch.HostDeviceLock`, behind timing windows) and ``"_gpu_windows"``
        (``[[start, end], ...]``, epochs of its GPU stretches, none of which overlaps a timing
        window): skip keys starting with ``_`` when reading the modes.
    """
    t0 = time.perf_counter()
    res: dict[str, Any] = results if results is not None else {}
    if not problems or workers <= 0:
        res["_wall_s"] = 0.0
        return res
    device = "cuda:0" if device_index is not None else "cpu"
    workers = min(workers, len(problems))  # a process per problem at most: the others would only take threads
    threads = compile_threads(available_cpus(), workers)
    given = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "")  # the user's own setting is kept (_init)
    res["_compile_threads"] = int(given) if given.isdigit() else threads
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
            futs = {ex.submit(_warm_one, p.code, p.file_name, precision, modes, no_grad, device, seed, tf32): p
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
