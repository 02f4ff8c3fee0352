"""Local executor: one trusted device-worker process per device slot on this host.

Each slot is a process (``multiprocessing`` spawn context) that sees exactly one GPU
(``CUDA_VISIBLE_DEVICES``) or the CPU, holds a :class:`~..execution.device.DeviceEvaluator`, and runs
one job at a time. A slot whose process dies (a fault in the trusted reference, say) is restarted
and the job in flight becomes that candidate's ``runtime_error``; the run goes on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing as mp
import os
import signal
import tempfile
import threading
import traceback
from typing import Any

from ..core import EvalResult, Outcome, Problem, TimingStats
from ..errors import PrerequisiteError
from ..execution.device import EvalJob
from ..execution.sandbox import die_with_parent
from ..protocols import Protocol
from . import parse_gpus
from .base import AffinityQueue, Executor, SlotInfo

__all__ = ["LocalExecutor", "resolve_devices", "plan_timing_cpus", "default_timing_cpus", "cpu_cores", "quiet_host_for"]

log = logging.getLogger(__name__)


def default_timing_cpus(devices: list[str], ncpu: int) -> int:
    """Cores reserved per device slot by default: 2 when every slot is a GPU and the host keeps at
    least 4 cores per slot beside them for builds and torch.compile warm-ups, else 0 (no pinning)."""
    if devices and all(d.startswith("cuda") for d in devices) and ncpu >= 6 * len(devices):
        return 2
    return 0


def cpu_cores(cpus: list[int]) -> dict[int, tuple[int, int]]:
    """Physical core of each logical CPU, ``(package, core_id)`` from sysfs; a CPU whose topology
    cannot be read is its own core."""
    out: dict[int, tuple[int, int]] = {}
    for c in cpus:
        try:
            base = f"/sys/devices/system/cpu/cpu{c}/topology/"
            with open(base + "physical_package_id") as f:
                pkg = int(f.read())
            with open(base + "core_id") as f:
                core = int(f.read())
            out[c] = (pkg, core)
        except (OSError, ValueError):
            out[c] = (-1, -1 - c)
    return out


def plan_timing_cpus(n_slots: int, per_slot: int, available: list[int], min_rest: int = 2,
                     cores: dict[int, Any] | None = None) -> tuple[list[list[int]], list[int]] | None:
    """Split the host's CPUs: at least ``per_slot`` of them for each device slot (its trusted worker
    and the candidate processes it starts, which do the timing), the rest for everything else (the
    runner, the build pool, torch.compile warm-ups). Whole physical cores are reserved, so a build
    never runs on a hyperthread sibling of a timing CPU.

    Why: launch-bound eager and torch.compile baselines are timed with CUDA events, and a
    host-side dispatch delayed by a busy CPU shows up as idle device time inside the timed region.
    On the H200 replay (24 builds and 8 warm-ups beside the timing, 32 cores) eager baselines of the
    same level-1 problems moved by up to 19% between runs while the candidates' single-kernel times
    moved by under 1%.

    Args:
        n_slots: device slots on this host.
        per_slot: logical CPUs to reserve for each, at least (0 = no pinning).
        available: the CPUs this process may use (``os.sched_getaffinity(0)``), any order.
        min_rest: fewest CPUs to leave for the rest.
        cores: physical core of each CPU (:func:`cpu_cores`); None = every CPU its own core.

    Returns:
        ``(slot_cpus, rest)`` with ``slot_cpus[i]`` the CPUs of slot ``i`` (whole cores, taken from
        the top), or None when ``per_slot`` is 0 or fewer than ``min_rest`` CPUs would be left.
    """
    if per_slot <= 0 or n_slots <= 0:
        return None
    groups: dict[Any, list[int]] = {}
    for c in sorted(set(available)):
        groups.setdefault((cores or {}).get(c, ("cpu", c)), []).append(c)
    order = sorted(groups.values(), key=lambda g: g[0])
    slots: list[list[int]] = []
    for _ in range(n_slots):
        mine: list[int] = []
        while len(mine) < per_slot and order:
            mine = sorted(mine + order.pop())
        if len(mine) < per_slot:
            return None
        slots.append(mine)
    rest = sorted(c for g in order for c in g)
    if len(rest) < max(1, min_rest):
        return None
    return slots, rest


def quiet_host_for(asked: bool | None, devices: list[str]) -> bool:
    """Whether a run's builds and warm-ups pause while a timing window is open (:mod:`..execution.quiet`).

    Args:
        asked: ``--quiet-host`` (True), ``--no-quiet-host`` (False) or neither (None).
        devices: the run's slot devices (:func:`resolve_devices`), e.g. ``["cuda:0", "cuda:0"]``.

    Returns:
        With None: True where every slot is on one GPU. On an H200, two runs of the same 20 level-1
        candidates, each measuring its own baselines with builds beside the first run's windows, gave
        speedups vs eager within a p95 of 36% of each other without it (docs/gpu/2026-12-02-s15/) and
        2.2% with it (docs/gpu/2026-12-02-s14/). With True on several devices: False, with a warning
        (windows on two GPUs overlap, and one would continue what the other paused).
    """
    one_gpu = len(set(devices)) == 1 and devices[0].startswith("cuda")
    if asked is None:
        return one_gpu
    if asked and len(set(devices)) > 1:
        log.warning("--quiet-host pauses builds and warm-ups only where every slot is on one device; "
                    "off for %d devices", len(set(devices)))
        return False
    return bool(asked)


def resolve_devices(spec: str | None, *, cpu_ok: bool = True) -> list[str]:
    """Device slots from a ``--gpus`` spec.

    Args:
        spec: None/"auto" (every visible GPU, else the CPU), "cpu", or GPU indices "0,1". An index may
            repeat ("0,0", "cpu,cpu"): several slots on one device overlap their references, builds
            and correctness checks, but take turns to time (one lock per physical device).

    Returns:
        Slot devices like ``["cuda:0", "cuda:1"]`` or ``["cpu"]``.

    Raises:
        ConfigError: a malformed spec, the empty string included (:func:`..executors.parse_gpus`).
        PrerequisiteError: GPUs requested where none is visible.
    """
    if spec is not None:  # "" is refused as the CLI refuses --gpus "" (it read as every visible GPU)
        spec = parse_gpus(str(spec))
    if spec in (None, "auto"):
        n = _gpu_count()
        return [f"cuda:{i}" for i in range(n)] if n else (["cpu"] if cpu_ok else [])
    idx = spec.split(",")
    if idx[0] == "cpu":
        return ["cpu"] * len(idx)  # "cpu,cpu": two slots sharing the CPU, timing in turn
    n = _gpu_count()
    if n == 0:
        raise PrerequisiteError("GPUs were requested but no CUDA GPU is visible",
                                fix="run on a GPU machine, or use --gpus cpu")
    bad = [i for i in idx if int(i) >= n]
    if bad:
        raise PrerequisiteError(f"GPU index {bad[0]} does not exist ({n} visible)", fix=f"use indices 0..{n - 1}")
    return [f"cuda:{i}" for i in idx]


def _gpu_count() -> int:
    """Number of CUDA GPUs, asked so that this process never initialises CUDA (NVML, else a child process: see
    :func:`_ask_gpu_count`); asked once per ``CUDA_VISIBLE_DEVICES`` value (a run asks twice)."""
    env_cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env_cvd is not None and env_cvd.strip() in ("", "-1"):
        return 0
    return _gpu_count_for(env_cvd)


@functools.cache
def _gpu_count_for(env_cvd: str | None) -> int:
    """:func:`_ask_gpu_count`, once per ``CUDA_VISIBLE_DEVICES`` value."""
    return _ask_gpu_count()


#: seconds the child that counts GPUs (:func:`_ask_gpu_count`) has to answer: its fresh ``import torch`` took 4-6 s on
#: an H200 host; longer is a driver that does not answer
GPU_COUNT_CHILD_TIMEOUT_S = 60.0


def _ask_gpu_count() -> int:
    """NVML's count (``torch.cuda._device_count_nvml``: no CUDA initialised, CUDA_VISIBLE_DEVICES applied;
    milliseconds), else a child process's ``torch.cuda.device_count()`` (a fresh ``import torch``: 4-6 s on
    an H200 host, session 24's ``run_to_executor``).

    Raises:
        PrerequisiteError: the child gave no answer within :data:`GPU_COUNT_CHILD_TIMEOUT_S` (a wedged driver:
            the run would otherwise wait without a word, then go on as if there were no GPU)."""
    try:
        import torch

        if not torch.backends.cuda.is_built():
            return 0
    except Exception:
        return 0
    n = _nvml_gpu_count(torch)
    if n >= 0:
        return n
    import subprocess

    try:
        out = subprocess.run(_gpu_count_child_argv(), capture_output=True, text=True,
                             timeout=GPU_COUNT_CHILD_TIMEOUT_S)
        return int(out.stdout.strip() or 0)
    except subprocess.TimeoutExpired:
        raise PrerequisiteError(
            f"counting the CUDA GPUs got no answer within {GPU_COUNT_CHILD_TIMEOUT_S:.0f} s (NVML did not answer "
            "either): the GPU driver is not responding",
            fix="check the GPUs with nvidia-smi (a hung driver needs the GPU reset or the machine rebooted), or "
                "run on the CPU with --gpus cpu or CUDA_VISIBLE_DEVICES=-1") from None
    except (subprocess.SubprocessError, ValueError, OSError):
        return 0


def _gpu_count_child_argv() -> list[str]:
    """The command of the child that asks CUDA for the GPU count (:func:`_ask_gpu_count`)."""
    import sys

    return [sys.executable, "-c", "import torch;print(torch.cuda.device_count())"]


def _nvml_gpu_count(torch: Any, timeout_s: float = 10.0) -> int:
    """``torch.cuda._device_count_nvml()`` (-1: NVML missing or failed, MIG, or no answer within ``timeout_s``:
    a wedged driver can block NVML, and this runs before the run prints anything), its warnings kept off the
    user's terminal (a host with the driver's library but not its kernel module)."""
    import threading
    import warnings

    got = [-1]

    def ask() -> None:
        try:
            got[0] = int(torch.cuda._device_count_nvml())
        except Exception:  # noqa: BLE001 - a private helper that may move: the child's answer stands
            got[0] = -1

    # (the filters are the process's: set and restored here, so a thread still hung past the limit leaves them be)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NVML.*")
        t = threading.Thread(target=ask, name="kb-nvml-count", daemon=True)
        t.start()
        t.join(timeout_s)
    return -1 if t.is_alive() else got[0]


def _slot_pids(shared: Any) -> list[int]:
    """The slot workers' pids in the executor's shared array (0: a slot not started yet)."""
    return [p for p in shared[:] if p > 0]


#: a device worker's exit code after Ctrl-C reached it (its candidate's process ended first)
INTERRUPTED_EXIT = 130


def _slot_main(*args: Any, **kwargs: Any) -> None:
    """Device-worker process: owns one device, serves jobs until told to stop (:func:`_slot_serve`).
    Ctrl-C in the terminal reaches it too: the job's own handlers end its candidate's process, then it
    exits with :data:`INTERRUPTED_EXIT` without a traceback (the runner is stopping)."""
    try:
        _slot_serve(*args, **kwargs)
    except KeyboardInterrupt:
        os._exit(INTERRUPTED_EXIT)


def _slot_serve(conn: Any, device: str, options: dict[str, Any], timing_lock: Any = None,
                window_queue: tuple[Any, int] | None = None, quiet: tuple[int, Any] | None = None,
                ledger: tuple[Any, Any, Any, int] | None = None) -> None:
    """The body of :func:`_slot_main`."""
    die_with_parent()
    import faulthandler

    # its Python stacks on SIGUSR1 (scripts/gpu's lock watch asks a long holder of the device's lock);
    # without a handler the signal would end the worker
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    from ..execution.sandbox import make_undumpable

    make_undumpable()
    cpus = options.get("cpus")
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)  # the zygote and every candidate process inherit it
    if device.startswith("cuda:"):
        from ..hardware import visible_device_id

        # a logical index of this run's visible GPUs, mapped through an inherited restriction
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_device_id(device.split(":", 1)[1])
        dev = "cuda:0"
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        dev = "cpu"
    import logging as _logging

    _logging.basicConfig(level=options.get("log_level", _logging.WARNING),
                         format=f"%(levelname)s [{device}] %(name)s: %(message)s")
    from ..execution.device import DeviceEvaluator

    quieter = None
    if quiet is not None:
        from ..execution.quiet import HostQuieter

        root, slot_pids = quiet
        # the runner's other descendants pause while this slot times: builds, warm-ups (not the slots)
        quieter = HostQuieter(root, lambda: _slot_pids(slot_pids))

    memory_ledger = None
    if ledger is not None:
        from ..execution.memledger import MemoryLedger

        memory_ledger = MemoryLedger(*ledger)
    ev = DeviceEvaluator(dev, scratch_dir=options.get("scratch_dir"), build_cache=options.get("build_cache"),
                         start_method=options.get("start_method", "zygote"),
                         memory_limit_bytes=options.get("memory_limit_bytes"), sandbox=options.get("sandbox", True),
                         timing_lock=timing_lock, physical_device=device,
                         memory_share=float(options.get("memory_share", 1.0)), window_queue=window_queue,
                         quieter=quieter, memory_ledger=memory_ledger)
    fp = ev.fingerprint()
    fp["slot_device"] = device
    if hasattr(os, "sched_getaffinity"):
        fp["slot_cpus"] = sorted(os.sched_getaffinity(0))
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
                stats, info = ev.baselines_with_info(problem, protocol, seed, modes)
                conn.send(("ok", ({m: s.to_dict() for m, s in stats.items()}, info, ev.fingerprint())))
            else:
                conn.send(("error", f"unknown request {kind!r}"))
        except Exception:
            conn.send(("error", traceback.format_exc()))
    ev.close()


class _Slot:
    def __init__(self, index: int, device: str, options: dict[str, Any], timing_lock: Any,
                 window_queue: tuple[Any, int] | None = None, slot_pids: Any = None,
                 ledger: tuple[Any, Any, Any, int] | None = None) -> None:
        """Start the worker process; :meth:`wait_ready` waits for it (the executor starts every slot first)."""
        self.index = index
        self.device = device
        self.options = options
        self.timing_lock = timing_lock
        self.window_queue = window_queue
        self.slot_pids = slot_pids  # every slot's worker pid (shared), or None: no quiet host
        self.ledger = ledger  # (claims, pending, lock, index on the device) of the memory ledger, or None
        self._restart_next = False  # the worker exited on SIGINT: start it again at the next call
        self.lock = threading.Lock()
        self.fingerprint: dict[str, Any] = {}
        self._launch()

    def _start(self) -> None:
        self._launch()
        self.wait_ready()

    def _launch(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_slot_main, args=(child, self.device, self.options, self.timing_lock, self.window_queue,
                                      (os.getpid(), self.slot_pids) if self.slot_pids is not None else None,
                                      self.ledger),
                                name=f"kbench-slot{self.index}", daemon=True)
        self.proc.start()
        if self.slot_pids is not None:
            self.slot_pids[self.index] = self.proc.pid  # kept running when another slot quiets the host
        child.close()

    def wait_ready(self) -> None:
        """Block until the worker reports its fingerprint (each takes seconds: CUDA, the sandbox probe).

        Raises:
            PrerequisiteError: it did not start within 10 minutes, or died while starting.
        """
        if not self.conn.poll(600):
            raise PrerequisiteError(f"device worker for {self.device} did not start within 10 minutes")
        try:
            tag, fp = self.conn.recv()
        except EOFError:
            raise PrerequisiteError(f"device worker for {self.device} died while starting "
                                    f"(exit code {self.proc.exitcode})", fix="run with -vv to see its log") from None
        self.fingerprint = fp

    def call(self, msg: tuple[Any, ...]) -> tuple[str, Any]:
        """Send a request and wait for the answer; restart the worker if it died. A worker that exited on
        SIGINT (:data:`INTERRUPTED_EXIT`: Ctrl-C, the run is most likely stopping) is restarted at the next
        call instead, so shutting down starts nothing, and a run that goes on still has its slot."""
        with self.lock:
            if self._restart_next:
                self._restart_next = False
                self._start()
            try:
                self.conn.send(msg)
                return self.conn.recv()
            except (EOFError, OSError, BrokenPipeError) as e:
                self.proc.join(timeout=5)  # reaped, so the exit code (a negative signal number) is known
                code = self.proc.exitcode
                if code == INTERRUPTED_EXIT:
                    self._forget_claims()
                    self._restart_next = True
                    log.info("device worker %s interrupted (SIGINT); restarted if the run goes on", self.device)
                    return ("died", "device worker interrupted (SIGINT)")
                log.error("device worker %s died (exit code %s); restarting", self.device, code)
                try:
                    self.proc.kill()
                except Exception:
                    pass
                self._forget_claims()
                if self.slot_pids is not None:
                    # it may have died with the run's builds and warm-ups paused for a window
                    from ..execution.quiet import continue_all

                    continue_all(os.getpid(), _slot_pids(self.slot_pids))
                self._start()
                return ("died", f"device worker died (exit code {code}): {e}")

    def _forget_claims(self) -> None:
        """Clear what a dead worker held in the run's shared state: its window flag (it may have died
        waiting for or holding a window) and its memory claim or wait."""
        if self.window_queue is not None:
            self.window_queue[0][self.window_queue[1]] = 0
        if self.ledger is not None:
            from ..execution.memledger import clear_slot

            clear_slot(self.ledger[0], self.ledger[1], self.ledger[3])

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
        # cores for the timing side: each slot (and its candidates) gets its own, and this process,
        # with every build and warm-up process it starts from now on, keeps the rest
        per_slot = self.options.pop("timing_cpus", None)
        quiet_host = quiet_host_for(self.options.pop("quiet_host", None), devices)
        self._saved_affinity: set[int] | None = None
        plan = None
        if hasattr(os, "sched_getaffinity"):
            avail = sorted(os.sched_getaffinity(0))
            explicit = per_slot is not None  # asked for: honoured while one core is left for the rest
            if per_slot is None:
                per_slot = default_timing_cpus(devices, len(avail))
            plan = plan_timing_cpus(len(devices), int(per_slot), avail, min_rest=1 if explicit else 2,
                                    cores=cpu_cores(avail))
            if explicit and per_slot and plan is None:
                log.warning("--timing-cpus %s: too few cores (%d) for %d slot(s); not pinning", per_slot,
                            len(avail), len(devices))
        # N slots on one GPU plan for 1/N of its memory each (shared input sets, timing copies, references),
        # or, through the device's memory ledger, each job for what it needs while the others need little
        slot_opts = [{**self.options, "memory_share": 1.0 / devices.count(d)} for d in devices]
        if plan is not None:
            for o, cpus in zip(slot_opts, plan[0]):
                o["cpus"] = cpus
        # every worker starts at once (each takes seconds), then each is waited for
        # per physical device, one flag per slot on it: set while the slot waits for or holds a window
        # (no lock: one writer per flag, and a worker killed while reading must not leave a lock held)
        queues = {d: ctx.Array("b", devices.count(d), lock=False) for d in devices}
        index_on = [devices[:i].count(d) for i, d in enumerate(devices)]
        # every slot's pid: while one times, the run's other processes (builds, warm-ups) pause, not these
        slot_pids = ctx.Array("i", len(devices), lock=False) if quiet_host else None
        # per physical device with several slots: the memory ledger (see execution/memledger.py)
        from ..execution import memledger

        self._ledger_files: list[str] = []
        ledgers = {}
        for d in sorted(set(devices)):
            if devices.count(d) > 1 and memledger.enabled():
                fd, path = tempfile.mkstemp(prefix="kbench-ledger-", suffix=".lock")
                os.close(fd)
                self._ledger_files.append(path)
                ledgers[d] = memledger.new_state(ctx, devices.count(d), path)
        # the executor's own handle on each ledger: it ends the lane's reserve when no large job is left there
        self._lane_ledgers = {d: memledger.MemoryLedger(*state, -1) for d, state in ledgers.items()}
        self._slots = [_Slot(i, d, slot_opts[i], locks[d], (queues[d], index_on[i]), slot_pids,
                             (*ledgers[d], index_on[i]) if d in ledgers else None)
                       for i, d in enumerate(devices)]
        try:
            for slot in self._slots:
                slot.wait_ready()
        except BaseException:
            for slot in self._slots:
                if slot.proc.is_alive():
                    slot.proc.kill()
            self._remove_ledger_files()
            raise
        if plan is not None:
            self._saved_affinity = set(os.sched_getaffinity(0))
            os.sched_setaffinity(0, plan[1])
        self._free = AffinityQueue(len(self._slots), groups=[s.device for s in self._slots])

    @property
    def slots(self) -> list[SlotInfo]:
        return [SlotInfo(slot=s.index, device=s.device, fingerprint=s.fingerprint) for s in self._slots]

    async def _call(self, key: str, msg: tuple[Any, ...], large: bool = False) -> tuple[_Slot, str, Any]:
        i = await self._free.acquire(key, large=large)
        slot = self._slots[i]
        done = False
        try:
            tag, payload = await asyncio.to_thread(slot.call, msg)
            done = True
        finally:
            self._free.release(i, key if done else None, large=large)
            if large:
                self._end_lane_if_idle(slot.device)
        return slot, tag, payload

    def _end_lane_if_idle(self, device: str) -> None:
        """After a large job on ``device``: where the queue handed no other large job a slot there, the
        memory ledger's lane reserve goes back to the other slots (see execution/memledger.py)."""
        led = getattr(self, "_lane_ledgers", {}).get(device)
        # (not once the executor has closed and removed the lock files: the handle would make them again)
        if led is not None and not self._free.large_running(device) and os.path.exists(led.lock.path):
            try:
                led.end_lane()
            except OSError as e:  # the reserve lapses on its own (memledger.LANE_HOLD_S)
                log.warning("could not end the memory ledger's lane reserve on %s: %s", device, e)

    async def evaluate(self, job: EvalJob) -> EvalResult:
        # a large problem (EvalJob.large) runs one per GPU at a time, ahead of the others (AffinityQueue)
        slot, tag, payload = await self._call(job.problem.code_sha256, ("evaluate", job), large=job.large)
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

    def _remove_ledger_files(self) -> None:
        for path in getattr(self, "_ledger_files", ()):
            try:
                os.unlink(path)
            except OSError:
                pass

    async def close(self) -> None:
        try:
            await asyncio.gather(*(asyncio.to_thread(s.stop) for s in self._slots))
        finally:
            self._remove_ledger_files()
            if self._saved_affinity is not None:
                # (the calling thread's affinity: threads started meanwhile keep the narrower set)
                os.sched_setaffinity(0, self._saved_affinity)
                self._saved_affinity = None
