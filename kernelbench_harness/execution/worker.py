"""The candidate process: imports one candidate, runs it on inputs it is given, times it.

This module runs on the *untrusted* side of the boundary. It is imported (with torch, numpy and
optionally triton) before any candidate code, so the timer and comparison functions it captured
are the originals. It never sees reference outputs: it writes the candidate's outputs to files,
and the trusted device worker compares them (see :mod:`.device`). Only torch, numpy, triton and
the standard library are needed here (the GPU image lacks the harness's other dependencies).

Conversation with the trusted side (JSON lines, see :mod:`.channel`)::

    child -> {"event": "ext_request", name, args}   parent -> {"cmd": "ext_cached" | "ext_private" | "ext_error"}
             (mode "build", any number of times during the import: BuildPool._serve_request)
    child -> {"event": "built", ok, error, kind, findings, build, phase_s}
    (mode "build" ends here)
    parent -> {"cmd": "construct"}   child -> {"event": "constructed", weights, phase_s}
    parent -> {"cmd": "next"}        (then, per correctness trial:)
    child -> {"event": "output", set, desc, findings, launches}
    parent -> {"cmd": "next"} | {"cmd": "stop"} | {"cmd": "continue"} (after the last trial)
    child -> {"event": "watched", findings}   (the precision watch's call is done)
    parent -> {"cmd": "time"}        child -> {"event": "timing", stats, info, findings}
    parent -> {"cmd": "recheck", set, inplace}   child -> {"event": "output", ...}
    parent -> {"cmd": "finish"}      child -> {"event": "done", findings}
    child -> {"event": "error", kind, error}   on any failure (then exits)
    child -> {"event": "finding", findings}    at any time: one finding, sent when it is made (_Job.flag)
    (each line the child sends carries the HMAC of the job's channel key, .channel.Channel: a line its candidate
    code wrote to the socket itself is refused as cheat(protocol))
    child -> {"event": "host_work", on, what}  at any time (job["compile_notice"]): a stretch of host work
             (a Triton JIT compile) begins, its device work synchronised first (on: true), or ends (on: false)

Mode ``compile_ext`` (the build pool's compile of a shared extension) runs no candidate code: it sends one
``{"event": "ext_compiled", ...}`` (:func:`.build.compile_shared_extension`) and exits.
"""

from __future__ import annotations

import copy
import functools
import gc
import os
import socket
import sys
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any, Callable

import torch

from . import timing as _timing  # captures the timer functions now, before any candidate import
from .build import (
    BuildRecord,
    CandidateBuildError,
    compile_shared_extension,
    install_build_hooks,
    with_no_gpu_hint,
)
from .channel import Channel
from .guards import ImportWatch, ProtectedSnapshot, ThreadWatch, run_watching_precision, snapshot_global_flags
from . import devshare as _devshare
from .quiet import children as _child_pids
from .quiet import proc_stat as _proc_stat
from .tensorio import DTYPES, decode_value, nbytes_of, read_tensor, tensor_name, write_tensor

__all__ = ["child_main", "device_times", "run_job"]

_allclose = torch.allclose
_sleep = time.sleep
_perf_counter = time.perf_counter  # phase times stay true when a candidate replaces time.perf_counter
_enumerate_threads = threading.enumerate
_gettrace, _getprofile = sys.gettrace, sys.getprofile
_equal = torch.equal
_Tensor = torch.Tensor
_type = type
_isinstance = isinstance
_COMPARE_FUNCS = {"torch.allclose": torch.allclose, "torch.equal": torch.equal, "torch.isclose": torch.isclose,
                  "torch.Tensor.__eq__": torch.Tensor.__eq__, "torch.Tensor.copy_": torch.Tensor.copy_,
                  "torch.Tensor.cpu": torch.Tensor.cpu, "torch.Tensor.to": torch.Tensor.to}

_DTYPE = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class _LaunchCounter:
    """Counts Triton kernel launches (compiled and interpreted) in this process."""

    def __init__(self) -> None:
        self.triton = 0
        self.names: dict[str, int] = {}
        self.originals: dict[str, Any] = {}
        self.suppress = False  # skip launches (the kernel-ablation call), counting them in ``suppressed``
        self.suppressed = 0
        self.returned: dict[int, Any] = {}  # id of a kernel -> what its last real launch returned
        self.ran: set[int] = set()  # ids of the compiled (not interpreted) kernels run in this process

    def install(self) -> None:
        try:
            import triton.runtime.jit as jit
        except Exception:
            return
        targets: list[tuple[str, Any]] = [("triton.JITFunction.run", jit.JITFunction)]
        try:
            import triton.runtime.interpreter as interp

            targets.append(("triton.InterpretedFunction.run", interp.InterpretedFunction))
        except Exception:
            pass
        for label, cls in targets:
            orig = cls.run
            self.originals[label] = orig
            counter = self

            def run(self_: Any, *args: Any, _orig: Any = orig, _jit: bool = label == "triton.JITFunction.run",
                    **kwargs: Any) -> Any:
                if counter.suppress and not kwargs.get("warmup", False):
                    counter.suppressed += 1
                    # what the last real launch of this kernel returned, so that the return value does not
                    # tell a skipped launch from a real one
                    return counter.returned.get(id(self_))
                job = _NOTICE_JOB[0]
                was_on = job is not None and job.host_work_on
                if _jit and id(self_) not in counter.ran:
                    # a compiled kernel's first run in this process sets Triton's driver and the kernel's binder
                    # up and compiles it: host work from here (announced, see host_work) until its
                    # post-compile hook, or at the latest until this run returns
                    counter.ran.add(id(self_))
                    _quietly(host_work, True)
                try:
                    out = _orig(self_, *args, **kwargs)  # a launch that raised ran nothing: not counted
                finally:
                    # a stretch begun in this run ends with it at the latest: a compile that raised (an autotuner's
                    # config that does not compile, caught by the autotuner) never reaches its post-compile hook
                    if not was_on and job is not None and job.host_work_on:
                        _quietly(host_work, False)
                counter.returned[id(self_)] = out
                if not kwargs.get("warmup", False):
                    counter.triton += 1
                    name = getattr(getattr(self_, "fn", None), "__name__", None) or getattr(self_, "__name__", "?")
                    counter.names[name] = counter.names.get(name, 0) + 1
                return out

            cls.run = run
            self.installed = getattr(self, "installed", {})
            self.installed[label] = (cls, run)

    def intact(self) -> list[str]:
        """Labels whose hook the candidate removed or replaced."""
        bad = []
        for label, (cls, fn) in getattr(self, "installed", {}).items():
            if cls.run is not fn:
                bad.append(label)
        return bad


#: the job whose channel host-work notices go out on (set by _Job), see :func:`host_work`
_NOTICE_JOB: list[Any] = [None]


def host_work(on: bool, what: str = "triton_compile") -> None:
    """Tell the trusted side that this process begins (``on``) or ends a stretch of host-only work, such as a
    Triton kernel's JIT compile inside a call (from a compiled kernel's first run, which also sets up Triton's
    driver and the kernel's argument binder, about 0.3-0.6 s in a fresh process on an H200 host, to its
    post-compile hook; and every later compile). Beginning one first synchronises the device, so no device work
    of this process is in flight: a timing window another slot queued may then go on while this process is
    stopped where it is (:meth:`.device.DeviceEvaluator._gpu_yield`). Does nothing unless the job asks for
    notices (``job["compile_notice"]``), outside the main thread, while the current stream is being captured
    into a CUDA graph, or where the stretch is already in that state. Its seconds go to ``phase_s``
    (``jit_compile``, and the count in ``jit_compiles``); the trusted side nets the time the process was stopped
    for other slots' windows inside calls out of it, not that inside the build or construction (a compile at
    import or in ``ModelNew.__init__``).

    Args:
        on: True where the stretch begins, False where it ends.
        what: what the work is (recorded by the trusted side).
    """
    j = _NOTICE_JOB[0]
    if j is None or not j.job.get("compile_notice") or bool(on) == j.host_work_on:
        return
    if threading.current_thread() is not threading.main_thread():
        return
    if on and j.device.type == "cuda":
        if torch.cuda.is_current_stream_capturing():
            return
        j.sync()
    j.host_work_on = bool(on)
    if on:
        j.host_work_t0 = _perf_counter()
    else:
        j._add_phase("jit_compile", _perf_counter() - j.host_work_t0)
        j._add_phase("jit_compiles", 1.0)
    _type(j).send(j, {"event": "host_work", "on": bool(on), "what": str(what)[:100]})  # the class's, not the object's


def _quietly(fn: Any, *args: Any) -> None:
    """``fn(*args)``, any exception dropped: a notice that cannot be sent (the device's error state surfacing in its
    synchronisation, a closed channel) must not change what the candidate's own code raises; the launch or the next
    synchronisation raises a device error again where it matters."""
    try:
        fn(*args)
    except Exception:
        pass


def _install_compile_notices() -> bool:
    """Announce every Triton JIT compile in this process (:func:`host_work`) through Triton's
    ``knobs.runtime.jit_cache_hook`` (called before a compile) and ``jit_post_compile_hook`` (after it; the
    compiled kernel's launcher and module are loaded there too, so that host work is inside the stretch).
    Hooks already set are still called. Not while Triton compiles asynchronously (its post-compile hook then
    runs elsewhere). Returns whether the hooks were installed (False without Triton or its knobs)."""
    try:
        from triton import knobs

        rt = knobs.runtime
        prev_pre, prev_post = rt.jit_cache_hook, rt.jit_post_compile_hook
    except Exception:
        return False

    def _async() -> bool:
        try:
            from triton.runtime import _async_compile

            return _async_compile.active_mode.get() is not None
        except Exception:
            return False

    def before(**kw: Any) -> Any:
        out = prev_pre(**kw) if prev_pre is not None else None
        if not out and not _async():  # a true answer skips the compile
            _quietly(host_work, True)
        return out

    def after(**kw: Any) -> Any:
        try:
            j = _NOTICE_JOB[0]
            if j is not None and j.host_work_on:
                try:  # the launcher and the module load, which the first launch would do right after
                    jf = getattr(kw.get("fn"), "jit_function", None)
                    dev = (kw.get("compile") or {}).get("device")
                    kern = jf.device_caches[dev][0].get(kw.get("key")) if jf is not None else None
                    init = getattr(kern, "_init_handles", None)
                    if callable(init):
                        try:
                            init()
                        except Exception:
                            # the launch raises it again where it matters: Triton keeps a shared-memory or thread
                            # limit's error for it, but a failed module load (out of device memory) would leave a
                            # launcher beside no function, so the launch is left to load it again and raise
                            if getattr(kern, "module", None) is None and getattr(kern, "_run", None) is not None \
                                    and not isinstance(kern._run, functools.partial):
                                kern._run = None
                except Exception:
                    pass
                _quietly(host_work, False)
        except Exception:
            pass
        return prev_post(**kw) if prev_post is not None else None

    try:
        rt.jit_cache_hook = before
        rt.jit_post_compile_hook = after
    except Exception:
        return False
    return True


def _finding(check: str, severity: str, tag: str, message: str, **data: Any) -> dict[str, Any]:
    return {"check": check, "severity": severity, "tag": tag, "message": message, "data": data}


def _become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``): a process the
    candidate started that double-forks or calls ``setsid`` then stays this process's child, where
    :func:`_children` finds it, instead of going to init. False where the call is not available."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> dict[int, str]:
    """Live (not zombie) child processes of this process, by pid: their command names. Zombies are reaped."""
    out = {}
    for pid in _child_pids(os.getpid()):
        fields = _proc_stat(pid)
        if not fields:
            continue  # ended meanwhile
        if fields[0] == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except OSError:
                pass
            continue
        try:
            with open(f"/proc/{pid}/comm") as fh:
                out[pid] = fh.read().strip()
        except OSError:
            out[pid] = str(pid)
    return out


def _tail(text: str, n: int = 4000) -> str:
    return text if len(text) <= n else "...\n" + text[-n:]


class _Forbid:
    """Makes every ``torch.nn.functional`` callable raise while active (CUDA Agent's rule)."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> "_Forbid":
        if not self.active:
            return self
        import torch.nn.functional as F

        for name in dir(F):
            obj = getattr(F, name)
            if callable(obj) and not name.startswith("_") and not isinstance(obj, type):
                self.saved[name] = obj

                def blocked(*a: Any, _n: str = name, **k: Any) -> Any:
                    raise RuntimeError(f"torch.nn.functional.{_n} is forbidden inside ModelNew.forward "
                                       f"under this protocol")

                setattr(F, name, blocked)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.saved:
            import torch.nn.functional as F

            for name, obj in self.saved.items():
                setattr(F, name, obj)
            self.saved.clear()


# the job's channel, kept apart from the job object (whose attributes candidate code could reach), and
# the send function as imported
_CHANNEL: list[Channel | None] = [None]
_CHANNEL_SOCK: list[Any] = [None]
_CHANNEL_SEND = Channel.send
_CHANNEL_FD: list[tuple[int, int]] = [(0, 0)]  # (st_dev, st_ino) of the channel's socket when the job began
_fstat, _exit = os.fstat, os._exit
_function_depth = torch._C._len_torch_function_stack
_dispatch_depth = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)


def _mode_depths() -> tuple[int, int]:
    """How many torch function modes and dispatch modes are active."""
    return _function_depth(), _dispatch_depth()


def _flatten(x: Any) -> list[Any]:
    if _isinstance(x, (list, tuple)):
        out: list[Any] = []
        for y in x:
            out.extend(_flatten(y))
        return out
    return [x]


def _device_peak_bytes() -> int | None:
    """The most device memory this process's allocator held (``torch.cuda.max_memory_reserved``), or None
    without CUDA in use here. Reported for the trusted side's memory figures only (the candidate's code
    could change it; nothing is decided on it)."""
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return int(torch.cuda.max_memory_reserved())
    except Exception:  # noqa: BLE001 - a figure, not a check
        pass
    return None


def build_model_new(mod: types.ModuleType, init_inputs: Callable[[], list[Any]], seed: int,
                    device: torch.device | None) -> tuple[Any, str, str | None]:
    """``mod.ModelNew(*init_inputs())`` under ``seed``: inside ``torch.device(device)`` where ``device`` is given
    (``protocol.weights_device``: where the trusted side built the reference, so a ``ModelNew`` laid out as
    ``Model`` draws the same values from that device's generator), else on the host.

    A build that raises on the device is done again on the host, from fresh init inputs: its weights that the
    ``state_dict`` does not carry then differ from the reference's, as they would with another layout. The
    device's work is finished (synchronised) before this returns: what follows (the weights' files read) is
    host work, during which the process may be stopped for another slot's timing window.

    Returns:
        ``(model, built_on, device_error)``: ``built_on`` is ``"device"`` or ``"cpu"``; ``device_error`` the
        device build's error (type and message, 300 characters at most) where it fell back, else None.

    Raises:
        Whatever the host's build raises; and running out of device memory on the device, which a host build
        followed by the move to the device would only meet again (the verdict is ``oom``).
    """
    device_error = None
    if device is not None:
        torch.manual_seed(seed)
        try:
            with torch.device(device):
                model = mod.ModelNew(*init_inputs())
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return model, "device", None
        except Exception as e:  # noqa: BLE001 - built again on the host below, whose error is the verdict's
            if _classify_exception(e) == "oom":
                raise
            device_error = f"{type(e).__name__}: {e}"[:300]
        if device.type == "cuda":  # the failed build's memory (its traceback is gone)
            gc.collect()
            torch.cuda.empty_cache()
    torch.manual_seed(seed)
    return mod.ModelNew(*init_inputs()), "cpu", device_error


def _classify_exception(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    if _isinstance(e, MemoryError) or "out of memory" in text.lower() or type(e).__name__ == "OutOfMemoryError":
        return "oom"
    return "runtime_error"


class _Job:
    def __init__(self, chan: Channel, job: dict[str, Any]) -> None:
        self.chan = chan
        _CHANNEL[0] = chan
        _CHANNEL_SOCK[0] = chan.sock
        st = _fstat(chan.sock.fileno())
        _CHANNEL_FD[0] = (st.st_dev, st.st_ino)  # what the channel's descriptor names (checked in send)
        # torch function / dispatch modes active before any candidate code: one the candidate enters can
        # see and change every tensor operation, the harness's own reads of outputs included
        self.modes0 = _mode_depths()
        self.job = job
        self.dir = Path(job["job_dir"])
        self.inputs_dir = Path(job["inputs_dir"])
        (self.dir / "outputs").mkdir(parents=True, exist_ok=True)
        self.device = torch.device(job["device"])
        self.protocol: dict[str, Any] = job["protocol"]
        self.refresh_key = int(job.get("refresh_key") or 0)  # timing.keyed_round: the trusted side's secret
        self.trial_launches: list[int] = []  # each judged call's custom-kernel launches (time_it's timed-path check)
        self.precision = _DTYPE[self.protocol.get("precision", "fp32")]
        self.record = BuildRecord()
        self.launches = _LaunchCounter()
        self.phase_s: dict[str, float] = {}
        if "tf32" in self.protocol:  # the candidate runs under the reference's numeric rules
            from .guards import apply_tf32

            apply_tf32(self.protocol.get("tf32"))
        self.flags0 = snapshot_global_flags()
        self.threads0 = {t.ident for t in _enumerate_threads()}
        self.thread_watch = ThreadWatch()
        self.thread_watch.install()
        self.threads_seen = 0  # threads the watch saw start that were reported (check_integrity)
        # Python the scan never read: a module written to the private folder, to a folder put on sys.path, or
        # changed while the candidate runs
        private = [self.dir] + ([Path(job["build_dir"])] if job.get("build_dir") else [])
        self.import_watch = ImportWatch(private, on_refuse=lambda name, origin, why: _Job.flag(self, _finding(
            "runtime.import", "cheat", "introspection", f"imported {name} from {origin}: {why}")))
        self.import_watch.install()
        self.import_watch_reported = False
        # identities of timers, comparisons and the harness's own code, before any candidate code runs
        self.protected = ProtectedSnapshot()
        self.tampered: set[str] = set()
        self.watched_precision = False
        self.model: Any = None
        self.sets_cache: dict[int, list[Any]] = {}
        # device memory shared by the trusted side (see .devshare): the input sets' buffers, mapped at
        # first use, and the buffer outputs are copied into (from offset 0 for each message)
        self.share: dict[str, Any] | None = job.get("share") if self.device.type == "cuda" else None
        self.shared_out: torch.Tensor | None = None
        self.out_cursor = 0
        # a stretch of announced host work (host_work) is on, and since when (perf_counter s)
        self.host_work_on = False
        self.host_work_t0 = 0.0
        self.compile_notices = False  # Triton's compile hooks installed (_install_compile_notices)
        _NOTICE_JOB[0] = self

    # -- helpers -----------------------------------------------------------------------------
    def send(self, obj: dict[str, Any]) -> None:
        """Send ``obj`` to the trusted side. Called through the class (``_Job.send(job, obj)``), never through the
        object: a candidate that reached the job object could shadow a method with an attribute of its own (the
        harness's job object had ``send`` replaced so that every time it sent was divided by 1000); such an
        attribute is reported and removed here."""
        own = object.__getattribute__(self, "__dict__")
        shadowed = [k for k in list(own) if k in _JOB_METHODS]
        extra: list[dict[str, Any]] = []
        if shadowed:
            for k in shadowed:
                own.pop(k, None)
            extra.append(_finding("runtime.timer-tamper", "cheat", "timer-tamper",
                                  "the harness's job object had its method(s) shadowed: " + ", ".join(shadowed[:8])))
        try:
            fd_now = _fstat(_CHANNEL_SOCK[0].fileno())
            same_fd = (fd_now.st_dev, fd_now.st_ino) == _CHANNEL_FD[0]
        except (OSError, ValueError):
            same_fd = False
        if not same_fd:
            # the channel's file descriptor now names another file (``os.dup2`` over it: a relay that rewrites what
            # the trusted side reads); nothing more is sent, and the trusted side sees the process end
            _exit(86)
        chan = _CHANNEL[0]
        if self.chan is not chan or _type(chan).send is not _CHANNEL_SEND or chan.sock is not _CHANNEL_SOCK[0]:
            # the candidate swapped the channel (or its send) to rewrite what reaches the trusted side
            extra.append(_finding("runtime.timer-tamper", "cheat", "timer-tamper",
                                  "the harness's channel to the trusted side was replaced"))
            self.chan = chan
            chan.sock = _CHANNEL_SOCK[0]
        if extra:
            obj.setdefault("findings", []).extend(extra)
        chan.send(obj)  # type: ignore[union-attr]

    def flag(self, finding: dict[str, Any]) -> None:
        """Send one finding to the trusted side now, as a message of its own (``{"event": "finding"}``), rather
        than keep it for the next answer: a list kept in this process is one a candidate that reaches the job
        object can empty (stop 39's attack replaced it with one that kept nothing). Called through the class."""
        _Job.send(self, {"event": "finding", "findings": [finding]})

    def check_integrity(self, where: str) -> None:
        """Timers, comparison functions, launch hooks and global flags unchanged; no new threads."""
        for name, fn in _timing.original_timers().items():
            mod_name, _, attr = name.rpartition(".")
            owner: Any = {"time": __import__("time"), "torch.cuda": torch.cuda, "torch.cuda.Event": torch.cuda.Event}.get(
                mod_name)
            if owner is not None and getattr(owner, attr, None) is not fn:
                _Job.flag(self, _finding("runtime.timer-tamper", "cheat", "timer-tamper",
                                         f"{name} was replaced ({where})"))
        for name, fn in _COMPARE_FUNCS.items():
            mod_name, _, attr = name.rpartition(".")
            owner = torch if mod_name == "torch" else torch.Tensor
            if getattr(owner, attr, None) is not fn:
                _Job.flag(self, _finding("runtime.timer-tamper", "cheat", "timer-tamper",
                                         f"{name} was replaced ({where})"))
        if not self.import_watch.intact() and not self.import_watch_reported:
            self.import_watch_reported = True
            _Job.flag(self, _finding("runtime.import", "cheat", "introspection",
                                     f"the harness's import watch was moved or removed from sys.meta_path ({where})"))
        for label in self.launches.intact():
            _Job.flag(self, _finding("runtime.timer-tamper", "cheat", "timer-tamper",
                                     f"the harness's launch counter {label} was removed ({where})"))
        changed = [n for n in self.protected.changed() if n not in self.tampered]
        if changed:
            self.tampered.update(changed)
            _Job.flag(self, _finding("runtime.timer-tamper", "cheat", "timer-tamper",
                                     f"replaced ({where}): " + ", ".join(changed[:12]), replaced=changed[:50]))
        if _mode_depths() != self.modes0 and not getattr(self, "_modes_reported", False):
            self._modes_reported = True
            _Job.flag(self, _finding("runtime.torch-mode", "cheat", "non-plain-tensor",
                                     f"a torch function or dispatch mode is active ({where}): it sees and "
                                     "can change every tensor operation, the harness's reads of outputs too"))
        if _gettrace() is not None or _getprofile() is not None or \
                getattr(threading, "_trace_hook", None) is not None or \
                getattr(threading, "_profile_hook", None) is not None:
            _Job.flag(self, _finding("runtime.trace-hook", "cheat", "introspection",
                                     f"a trace or profile hook is installed ({where})"))
        flags = snapshot_global_flags()
        changed = {k: (self.flags0[k], v) for k, v in flags.items() if self.flags0.get(k) != v}
        if changed:
            _Job.flag(self, _finding("runtime.global-state", "cheat", "global-state",
                                     f"process-wide switches changed ({where}): " +
                                     ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in changed.items()),
                                     changed={k: list(v) for k, v in changed.items()}))
            self.flags0 = flags  # report each change once
        started = self.thread_watch.threads[self.threads_seen:]
        if started:
            # a thread that had ended by now is deferred work all the same (one filled the output after forward
            # returned and was gone before this check); a library's own worker threads are not the candidate's
            names = [n for n, m in started if not m.startswith(_LIBRARY_THREADS)]
            self.threads_seen += len(started)
            if names:
                _Job.flag(self, _finding("runtime.threads", "cheat", "deferred-work",
                                         f"{len(names)} thread(s) started by Python code in the candidate's process "
                                         f"({where}): " + ", ".join(sorted(set(names))[:8])))
        procs = _children()
        if procs:
            # a process the candidate started, alive at a check: it runs outside the timer and every check here
            # (a review relayed the channel through one, another filled outputs after forward returned); it is ended
            # now, and its own children, which then come to this process (a subreaper), at the next check
            for pid in procs:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            _Job.flag(self, _finding("runtime.processes", "cheat", "deferred-work",
                                     f"{len(procs)} process(es) started in the candidate's process were running "
                                     f"({where}): " + ", ".join(sorted(set(procs.values()))[:8])))
        alive = {t.ident: t.name for t in _enumerate_threads() if t.ident not in self.threads0 and t.is_alive()}
        alive.update({i: n for i, n in self.thread_watch.running().items() if i not in self.threads0})
        if alive:
            _Job.flag(self, _finding("runtime.threads", "cheat", "deferred-work",
                                     f"{len(alive)} thread(s) started by the candidate are alive ({where}): "
                                     + ", ".join(sorted(alive.values()))))
            self.threads0 |= set(alive)

    def load_set(self, idx: int) -> list[Any]:
        """Input set ``idx`` on the device, cast to the run's precision (floating tensors only,
        or every tensor when the protocol casts integer inputs too)."""
        if idx in self.sets_cache:
            return self.sets_cache[idx]
        enc = self.job["sets"][idx]
        staged = self.share is not None and _isinstance(enc, dict) and "__staged__" in enc
        if staged:
            enc = self.request_set(idx)
        if self.share is not None and _isinstance(enc, dict) and _isinstance(enc.get("items"), list):
            vals = [self.shared_input(x["__tensor__"]) if _isinstance(x, dict) and "__tensor__" in x
                    else decode_value(x, self.inputs_dir) for x in enc["items"]]
            if staged:  # the staging buffer holds the next requested set instead: copies of our own
                vals = [v.clone() if _isinstance(v, torch.Tensor) else v for v in vals]
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)  # copied before the trusted side may write the next set
        elif self.device.type == "cuda" and _isinstance(enc, dict) and _isinstance(enc.get("items"), list):
            # top-level tensors go from the file to the device through the pinned staging buffer (no
            # full host copy of a multi-GB input); nested values decode as before, on the host
            vals = [read_tensor(x["__tensor__"], self.inputs_dir, device=self.device)
                    if _isinstance(x, dict) and "__tensor__" in x else decode_value(x, self.inputs_dir)
                    for x in enc["items"]]
        else:
            vals = decode_value(enc, self.inputs_dir)
        cast_all = bool(self.job.get("cast_int_inputs", False))
        out = []
        own = staged or self.share is None  # a copy of this process's own, not views of the shared buffers
        for v in vals:
            if _isinstance(v, torch.Tensor):
                v0 = v
                v = v.to(self.device)
                if v.is_floating_point() or cast_all:
                    v = v.to(self.precision)
                own = own or v is not v0
            out.append(v)
        if staged or (own and self.large):
            # sets too large to share all at once, or a large job's sets of its own (read from files, or cast
            # from the mapped ones): keep only the latest (the memory ledger's claim counts one,
            # DeviceEvaluator.work_nbytes)
            self.sets_cache = {idx: out}
        elif len(self.sets_cache) < 8:
            self.sets_cache[idx] = out
        return out

    def request_set(self, idx: int) -> dict[str, Any]:
        """Ask the trusted side to put input set ``idx`` into the one shared staging buffer (input sets too
        large to share all at once, see DeviceEvaluator._share_sets); returns the set's description,
        whose tensors are views of that buffer until the next request."""
        _Job.send(self, {"event": "need_set", "set": idx})
        reply = self.chan.recv()
        if reply.get("cmd") != "set_ready" or reply.get("set") != idx or not _isinstance(reply.get("items"), list):
            raise RuntimeError(f"harness protocol: expected input set {idx}, got {str(reply)[:200]}")
        return {"items": reply["items"]}

    def shared_input(self, desc: dict[str, Any]) -> torch.Tensor:
        """A view of one input tensor in its set's shared buffer (no copy)."""
        i = int(desc["shared"])
        buf = _MAPPED[("set", i)]
        dtype = DTYPES[desc["dtype"]]
        off = int(desc["offset"])
        shape = [int(x) for x in desc["shape"]]
        n = nbytes_of(dtype, shape)
        return buf[off:off + n].view(dtype).reshape(shape)

    def shared_output(self, o: torch.Tensor) -> dict[str, Any] | None:
        """Copy ``o`` (a plain tensor on the device) into the shared output buffer after the message's
        earlier outputs; its description, or None where it does not fit (it goes to a file)."""
        if self.share is None or o.device != self.device or o.dtype not in DTYPES.values():
            return None
        if self.shared_out is None:
            self.shared_out = _MAPPED[("out", 0)]
        n = o.numel() * o.element_size()
        off = self.out_cursor
        if off + n > self.shared_out.numel():
            return None
        self.shared_out[off:off + n].copy_(o.contiguous().reshape(-1).view(torch.uint8))
        self.sync()
        self.out_cursor = _devshare.round_up(off + n)
        return {"shared": True, "offset": off, "dtype": tensor_name(o.dtype), "shape": list(o.shape)}

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def poison(self, nbytes: int) -> None:
        """Leave freed memory full of 0xFF bytes (NaN for floats), so an uninitialised output is wrong."""
        if nbytes <= 0:
            return
        try:
            blk = torch.full((int(nbytes),), 0xFF, dtype=torch.uint8, device=self.device)
            del blk
        except Exception:
            pass

    def _share_extension(self, name: str, args: dict[str, Any]) -> bool:
        """Ask the build pool for extension ``name`` (``kb_<hash>``) of a self-contained ``load_inline`` call
        (``args``: :func:`~.build.shared_build_args`): the pool names it from ``args`` itself, compiles it in a
        process of its own (or waits for another build's compile of it) and stores it in the cache. True when the
        cache has it under ``name`` now, False when this process compiles it itself.

        Raises:
            CandidateBuildError: the pool's compile of it failed (the compiler's output).
        """
        _Job.send(self, {"event": "ext_request", "name": name, "args": args})
        reply = self.chan.recv()
        cmd = reply.get("cmd")
        if cmd == "ext_error":
            raise CandidateBuildError(str(reply.get("error") or "the extension failed to compile"))
        if cmd not in ("ext_cached", "ext_private"):
            raise RuntimeError(f"harness protocol: expected an answer to the request of {name}, got {str(reply)[:200]}")
        return cmd == "ext_cached" and reply.get("name") == name

    # -- phases --------------------------------------------------------------------------------
    def build(self) -> types.ModuleType | None:
        t0 = _perf_counter()
        build_dir = Path(self.job["build_dir"])
        cache = Path(self.job["build_cache"]) if self.job.get("build_cache") else None
        share = bool(self.job.get("ext_share"))  # the build pool's processes (BuildPool._serve_request)
        install_build_hooks(build_dir, cache, self.record, pch=bool(self.job.get("pch")),
                            share=self._share_extension if share else None)
        self.launches.install()
        if self.job.get("compile_notice"):  # (Triton's interpreter, on a CPU, compiles nothing: never called)
            self.compile_notices = _install_compile_notices()
        src_path = Path(self.job["candidate_path"])
        source = src_path.read_text(encoding="utf-8")
        mod = types.ModuleType("kb_candidate")
        mod.__file__ = str(src_path)
        if self.job.get("problem_namespace") and self.job.get("problem_path"):
            # KernelBench exec's the candidate in the reference's namespace: reproduce that faithfully.
            ppath = self.job["problem_path"]
            exec(compile(Path(ppath).read_text(encoding="utf-8"), ppath, "exec"), mod.__dict__)
        sys.modules["kb_candidate"] = mod
        try:
            code = compile(source, str(src_path), "exec")
            exec(code, mod.__dict__)
        except CandidateBuildError as e:
            self.phase_s["build"] = _perf_counter() - t0
            _Job.send(self, {"event": "built", "ok": False, "kind": "compile_error", "error": _tail(str(e)),
                             "build": self.record.to_dict(), "phase_s": self.phase_s})
            return None
        except SyntaxError as e:
            self.phase_s["build"] = _perf_counter() - t0
            _Job.send(self, {"event": "built", "ok": False, "kind": "compile_error",
                             "error": f"SyntaxError: {e.msg} (line {e.lineno})", "build": self.record.to_dict(),
                             "phase_s": self.phase_s})
            return None
        except BaseException as e:  # anything raised while importing the candidate module
            self.phase_s["build"] = _perf_counter() - t0
            kind = _classify_exception(e)
            err = with_no_gpu_hint(_tail(traceback.format_exc()), self.device.type)
            _Job.send(self, {"event": "built", "ok": False, "kind": "compile_error" if kind != "oom" else "oom",
                             "import_error": True, "error": err,
                             "build": self.record.to_dict(), "phase_s": self.phase_s})
            return None
        self.phase_s["build"] = _perf_counter() - t0
        self.check_integrity("after import")
        if not hasattr(mod, "ModelNew"):
            _Job.send(self, {"event": "built", "ok": False, "kind": "runtime_error",
                             "error": "the candidate defines no ModelNew", "build": self.record.to_dict(),
                             "phase_s": self.phase_s})
            return None
        if self.device.type == "cuda" and torch.cuda.is_initialized():
            self.sync()  # device work the import started is done before the answer (a yield point follows)
        _Job.send(self, {"event": "built", "ok": True, "build": self.record.to_dict(), "phase_s": self.phase_s})
        return mod

    def construct(self, mod: types.ModuleType) -> None:
        t0 = _perf_counter()
        model, built_on, device_error = build_model_new(
            mod, lambda: decode_value(self.job["init_inputs"], self.inputs_dir), int(self.job["weights_seed"]),
            self.device if self.job.get("weights_device") == "device" and self.device.type == "cuda" else None)
        transferred, skipped = 0, []
        if self.job.get("state_dict") is not None and _isinstance(model, torch.nn.Module):
            own = model.state_dict()
            incoming = {}
            for name, desc in self.job["state_dict"].items():
                if name in own and _isinstance(own[name], torch.Tensor):
                    t = read_tensor(desc, self.inputs_dir)
                    if tuple(t.shape) == tuple(own[name].shape):
                        incoming[name] = t
                        continue
                skipped.append(name)
            if incoming:
                model.load_state_dict(incoming, strict=False)
                transferred = len(incoming)
        if _isinstance(model, torch.nn.Module):
            model = model.to(self.device)
            if self.precision != torch.float32:
                model = model.to(self.precision)
        self.model = model
        self.phase_s["construct"] = _perf_counter() - t0
        self.weights_info = {"transferred": transferred, "skipped": skipped[:20], "n_skipped": len(skipped),
                             "built_on": built_on, **({"device_build_error": device_error} if device_error else {})}

    def call(self, args: list[Any]) -> Any:
        # correctness calls always run under no_grad (KernelBench's run_and_check_correctness does);
        # ``candidate_no_grad`` only chooses the grad mode of the timed calls
        with torch.no_grad(), _Forbid(bool(self.protocol.get("forbid_functional"))):
            return self.model(*args)

    def _add_phase(self, name: str, seconds: float) -> None:
        self.phase_s[name] = round(self.phase_s.get(name, 0.0) + seconds, 6)

    def run_trial(self, idx: int, *, args: list[Any] | None = None, where: str = "correctness") -> bool:
        """Run the candidate on input set ``idx`` (or given ``args``), write the output, report it. Its
        seconds go to ``phase_s``: ``trial_load`` (the set), ``trial_call`` (the call, synchronised) and
        ``trial_checks`` (copies, checks, the output's description)."""
        t_load = _perf_counter()
        inputs = self.load_set(idx) if args is None else args
        clone = bool(self.protocol.get("clone_inputs", True))
        pristine = [x.clone() if _isinstance(x, torch.Tensor) else x for x in inputs]
        call_args = [x.clone() if (clone and _isinstance(x, torch.Tensor)) else x for x in inputs] \
            if args is None else inputs
        self.poison(int(self.job.get("out_nbytes", 0)) * 2)
        calls0 = sum(self.record.calls.values())
        tl0 = self.launches.triton
        t0 = _perf_counter()
        out = self.call(call_args)
        if self.host_work_on:  # a compile that raised inside the call and was caught by the candidate
            host_work(False)
        self.sync()
        dt = _perf_counter() - t0
        self._add_phase("trial_load", t0 - t_load)
        self._add_phase("trial_call", dt)
        # the first call carries one-time costs (a Triton kernel's compile, cuDNN's and cuBLAS's set-up)
        self.phase_s.setdefault("trial_call_first", round(dt, 6))
        outs = _flatten(out)
        descs: list[Any] = []
        self.out_cursor = 0  # the trusted side has copied the previous message's outputs
        for j, o in enumerate(outs):
            if _isinstance(o, torch.Tensor):
                if _type(o) is not _Tensor:
                    _Job.flag(self, _finding("runtime.non-plain-tensor", "cheat", "non-plain-tensor",
                                             f"output {j} is a {_type(o).__name__}, not a plain torch.Tensor"))
                    o = o.as_subclass(_Tensor)
                if o.layout != torch.strided or o.is_sparse or o.device.type == "meta":
                    _Job.flag(self, _finding("runtime.non-plain-tensor", "cheat", "non-plain-tensor",
                                             f"output {j} has layout {o.layout} on {o.device}"))
                if o.device.type != self.device.type:
                    _Job.flag(self, _finding("runtime.device", "warn", "device",
                                             f"output {j} is on {o.device}, inputs on {self.device}"))
                if o.requires_grad:
                    o = o.detach()
                # deferred work: does the output change after forward returned and the device is idle?
                snap = o.clone()
                _sleep(0.02)
                self.sync()
                if not _same(snap, o):
                    _Job.flag(self, _finding("runtime.deferred-work", "cheat", "deferred-work",
                                             f"output {j} changed after forward returned ({where})"))
            descs.append(self.describe_output(o, f"out_{where}_{idx}_{j}.bin"))
        # inputs unchanged?
        if args is None:
            for j, (a, b) in enumerate(zip(call_args, pristine)):
                if _isinstance(a, torch.Tensor) and not (_equal(a, b) or (a.is_floating_point() and
                                                                         _equal(a.nan_to_num(), b.nan_to_num()))):
                    _Job.flag(self, _finding("runtime.input-mutation", "cheat", "input-mutation",
                                             f"forward wrote into input {j} ({where}, set {idx})"))
            for j, (a, b) in enumerate(zip(inputs, pristine)):
                if clone and _isinstance(a, torch.Tensor) and not _equal(a, b):
                    _Job.flag(self, _finding("runtime.input-mutation", "cheat", "input-mutation",
                                             f"input {j} changed although the candidate got a clone"))
        self.check_integrity(f"after {where} call on set {idx}")
        launches = {"extension_calls": sum(self.record.calls.values()) - calls0,
                    "triton_launches": self.launches.triton - tl0}
        if where == "correctness":
            self.trial_launches.append(launches["extension_calls"] + launches["triton_launches"])
        self._add_phase("trial_checks", _perf_counter() - t0 - dt)
        # every name that holds one of this call's copies (the loops' last items included) goes first
        out = outs = o = snap = pristine = call_args = a = b = None
        self.release_large()
        _Job.send(self, {"event": "output", "set": idx, "where": where, "descs": descs, "launches": launches,
                         "seconds": round(dt, 4)})
        return True

    @property
    def large(self) -> bool:
        """The trusted side's word (``job["large"]``, from the sizes its memory plan used): this job's input
        set and outputs take at least LARGE_SET_BYTES, so its process keeps one set of its own and takes
        turns with the trusted side's judging (:meth:`release_large`)."""
        return bool(self.job.get("large", False))

    def release_large(self) -> None:
        """For a large job on a GPU: hand the device memory this process has cached but no longer uses back
        to the driver, before the trusted side judges the output just described (its float64 upcasts of a
        multi-GB set need it). The caller has dropped its references to the call's copies first."""
        if self.large and self.device.type == "cuda":
            self.sync()
            _timing._empty_cache()  # captured at import, before any candidate code could replace it

    def ablate(self, idx: int, round_: int) -> None:
        """The kernel-ablation call (protocol ``ablate_kernels``): a copy of the model, called once with every
        Triton launch skipped and uninitialised tensors filled with NaN, on input set ``idx`` refreshed for
        round ``round_`` (values no call has seen); its output goes to the trusted side, which judges it.
        A copy, so that what the skipped call leaves in the model's own state (a cache) is thrown away.
        Sends ``{"event": "ablation", "descs": [...]}``, or ``"skipped"`` with the reason."""
        try:
            msg = self._ablation(idx, round_)
        except Exception as e:  # noqa: BLE001 - the harness's extra call failed (memory, say): no judgement
            msg = {"event": "ablation", "set": idx, "round": round_, "skipped": f"failed: {type(e).__name__}"}
        self.check_integrity("after the kernel-ablation call")
        _Job.send(self, msg)

    def _ablation(self, idx: int, round_: int) -> dict[str, Any]:
        msg: dict[str, Any] = {"event": "ablation", "set": idx, "round": round_}
        base = self.load_set(idx)
        if self.launches.triton == 0:
            msg["skipped"] = "no Triton launch in the correctness calls"
        elif sum(self.record.calls.values()) > 0:
            msg["skipped"] = "calls a compiled extension (its calls cannot be skipped)"
        elif not any(_isinstance(x, torch.Tensor) and x.is_floating_point() for x in base):
            msg["skipped"] = "no floating input to give new values"
        if "skipped" in msg:
            return msg
        fresh = [_timing.refresh_values(x, round_, key=self.refresh_key)
                 if _isinstance(x, torch.Tensor) and x.is_floating_point()
                 else x.clone() if _isinstance(x, torch.Tensor) else x for x in base]
        self.launches.suppress, self.launches.suppressed = True, 0
        try:
            model = copy.deepcopy(self.model)
            with torch.no_grad(), _PoisonEmpty(), _Forbid(bool(self.protocol.get("forbid_functional"))):
                out = model(*fresh)
            self.sync()
        except Exception as e:  # noqa: BLE001 - it needed its kernels (or could not be copied): nothing to judge
            msg["skipped"] = f"the call failed: {type(e).__name__}"
            out = None
        finally:
            self.launches.suppress = False
        if out is not None and self.launches.suppressed == 0:
            msg["skipped"] = "no Triton launch was skipped"
        if "skipped" not in msg:
            self.out_cursor = 0
            msg["launches_skipped"] = self.launches.suppressed
            msg["descs"] = [self.describe_output(o, f"out_ablation_{n}.bin") for n, o in enumerate(_flatten(out))]
        out = fresh = model = None
        self.release_large()
        return msg

    def describe_output(self, o: Any, file_name: str) -> dict[str, Any]:
        """One output for the trusted side: a tensor written to ``outputs/file_name`` (as a plain,
        detached tensor), a number or None as its value, anything else as unsupported."""
        if _isinstance(o, torch.Tensor):
            o = o.detach()
            if _type(o) is not _Tensor:
                o = o.as_subclass(_Tensor)
            return self.shared_output(o) or write_tensor(o, self.dir / "outputs" / file_name)
        if o is None or _isinstance(o, (int, float, bool)):
            return {"value": o}
        return {"unsupported": _type(o).__name__}

    def profile_kernels(self, idx: int) -> dict[str, Any]:
        """Device kernels of one forward call (CUDA profiler): ``kernels`` (name -> launches, for the launch
        check), ``streams`` (the streams they ran on) and ``kernel_us`` (name -> summed device time in
        microseconds, :func:`device_times`, for the trusted side's custom-kernel share)."""
        if self.device.type != "cuda":
            return {}
        try:
            from torch.autograd import DeviceType

            args = self.load_set(idx)
            # torch.autograd.profiler.profile is the Kineto/CUPTI profiler that torch.profiler.profile
            # wraps, minus the wrapper's start-up import of torch._inductor (1.5-2 s in every fresh
            # candidate process; scripts/gpu/startup_costs.py measures what is left)
            try:
                prof = torch.autograd.profiler.profile(use_cpu=False, use_device=self.device.type, use_kineto=True)
            except (TypeError, ValueError, RuntimeError):  # an older API: the wrapper
                from torch.profiler import ProfilerActivity, profile

                prof = profile(activities=[ProfilerActivity.CUDA])
            call_error: BaseException | None = None
            with prof:
                # the call's private copies are made inside the profiled region, on the current stream: a call
                # whose own kernels all run on one side stream is still seen on two (launch_hiding_for); their
                # copy kernels count in kernel_us's total, as work that is not the candidate's own
                try:
                    self.call([a.clone() if _isinstance(a, torch.Tensor) else a for a in args])
                    self.sync()
                except Exception as e:  # the candidate's own failure, not the profiler's: told apart below
                    call_error = e
            if call_error is not None:
                # a call that ran in the correctness trials and fails only here (under the profiler: a candidate
                # that reads the profiler's state to switch the share check off) is the candidate's runtime error
                return {"call_error": f"{type(call_error).__name__}: {call_error}"[:2000],
                        "oom": _classify_exception(call_error) == "oom"}
            events = prof.events() if hasattr(prof, "events") else prof.function_events
            names: dict[str, int] = {}
            streams: set[int] = set()
            for ev in events:
                if ev.device_type == DeviceType.CUDA:
                    names[ev.name] = names.get(ev.name, 0) + 1
                    # the kernel's stream: Kineto's metadata (newer torch), else the device resource id
                    s = getattr(getattr(ev, "event_metadata", None), "stream", None)
                    if s is None:
                        s = getattr(ev, "device_resource_id", None)
                    if isinstance(s, int):
                        streams.add(s)
            return {"kernels": names, "streams": sorted(streams), "kernel_us": device_times(events, DeviceType.CUDA)}
        except Exception as e:  # profiler unavailable: the trusted side falls back to call counts
            return {"error": f"{type(e).__name__}: {e}"[:2000]}

    def watch_precision(self, idx: int) -> None:
        """One extra call on input set ``idx`` with every PyTorch operation watched for float16 /
        bfloat16 / float8 tensors and TF32 switches (fp32 runs only; EXPLOITS K-08). Catches lower
        precision the source scan cannot see (dtypes reached through computed names, say)."""
        if self.watched_precision or self.precision != torch.float32:
            return
        self.watched_precision = True
        args = [x.clone() if _isinstance(x, torch.Tensor) else x for x in self.load_set(idx)]
        try:
            evidence, _ = run_watching_precision(lambda: self.call(args))
            self.sync()
        except Exception:  # the extra call failed under the watch: no evidence either way
            return
        if evidence:
            _Job.flag(self, _finding("runtime.precision", "policy", "precision",
                                     "lower-precision arithmetic in an fp32 run: " + "; ".join(evidence[:6]),
                                     ops=evidence))

    def time_it(self, timer: dict[str, Any] | None = None) -> None:
        """One timed block (the trusted side may ask for several, alternating with the baselines);
        ``timer`` replaces the job's timer settings for this block."""
        if self.device.type == "cuda":
            # what the correctness trials left cached goes back first: timing copies its sets twice over
            # (6 GiB each for current KernelBench's largest level-1 inputs) beside the shared buffers
            _timing._empty_cache()
        # private copies: the in-place recheck later overwrites them with fresh values
        sets = [[x.clone() if _isinstance(x, torch.Tensor) else x for x in self.load_set(i)]
                for i in self.job["timing_sets"]]
        k = len(sets)
        base = [[x.clone() if _isinstance(x, torch.Tensor) else x for x in s] for s in sets]
        if self.share is not None and self.share.get("staged"):
            self.sets_cache.clear()  # a staged set's own copy: timing has two of its own
        last_round: list[int | None] = [None] * k
        # the trial count runs on across blocks, so no refresh round is ever used twice in a run
        trial = self.__dict__.setdefault("_refresh_trial", [0])
        first = trial[0]  # time_callable numbers this block's trials from 0: keep sets and refreshes in step

        def refresh() -> None:
            """Before each timed trial, outside the timed region: new values in the buffers of the set
            about to be used (floating inputs as :func:`.timing.refresh_values` gives them for a round
            never used before in this run, other tensors' version counters bumped), so a result cached
            by address, identity, version or contents is never what gets timed (EXPLOITS K-16)."""
            i = trial[0]
            trial[0] += 1
            j, r = i % k, i // k
            for buf, src in zip(sets[j], base[j]):
                if _isinstance(buf, torch.Tensor):
                    if buf.is_floating_point():
                        _timing.refresh_values(src, r, out=buf, key=self.refresh_key)
                    else:
                        torch.autograd.graph.increment_version(buf)
            last_round[j] = r
        settings = _timing.TimerSettings(**(timer or self.job["timer"]))
        model = self.model

        nograd = bool(self.protocol.get("candidate_no_grad", True))

        timed: dict[str, Any] = {}
        modes_in_timing = self.modes0
        odd: list[str] = []  # outputs of timed calls that are not plain tensors (a lazy subclass, say)

        def fn(i: int) -> Any:
            j = (first + i) % k
            n_calls[0] += 1
            if nograd:
                with torch.no_grad():
                    out = model(*sets[j])
            else:
                out = model(*sets[j])
            # each timed call's output must be a plain tensor (or plain containers of them): a subclass
            # could compute on first use, after the timed region (a type check costs nanoseconds)
            if not odd and _mode_depths() != modes_in_timing:
                odd.append("value under an active torch function or dispatch mode")
            if _type(out) is not _Tensor and not odd:
                for o in _flatten(out):
                    if _isinstance(o, torch.Tensor) and _type(o) is not _Tensor:
                        odd.append(_type(o).__name__)
                        break
            timed["out"], timed["set"] = out, j  # the last call is a timed one: judged afterwards
            return out

        # custom-kernel launches before timing (the correctness calls') and during it: a candidate that ran its kernels
        # where it was judged and none where it was timed (it told the timing loop's calls apart, by the time between
        # them, say, and ran PyTorch there) timed something else than what was judged
        tl_before, calls_before = self.launches.triton, sum(self.record.calls.values())
        n_calls = [0]
        t0 = _perf_counter()
        # between placements (protocol.placements) the buffers move to new memory: ``sets`` is replaced
        # in place, so fn and refresh index the moved tensors
        placer = _timing.Placer(sets, self.device)
        try:
            with _Forbid(bool(self.protocol.get("forbid_functional"))):
                stats, info = _timing.time_callable(fn, self.device, settings, between=refresh, relocate=placer)
        finally:
            placer.release()  # the earlier placements' copies, back to the driver
        info["placements_moved"], info["placements_skipped"] = placer.moved, placer.skipped
        self.phase_s["time"] = self.phase_s.get("time", 0.0) + _perf_counter() - t0
        timed_launches = self.launches.triton - tl_before
        timed_ext_calls = sum(self.record.calls.values()) - calls_before
        info["timed_triton_launches"], info["timed_extension_calls"] = timed_launches, timed_ext_calls
        info["timed_calls"] = n_calls[0]
        judged = list(self.trial_launches)
        timed_custom = timed_launches + timed_ext_calls
        median = sorted(judged)[len(judged) // 2] if judged else 0  # (the first call's autotuning set aside)
        if n_calls[0] > 0 and ((sum(judged) > 0 and timed_custom == 0) or
                               (len(judged) >= 3 and median > 0 and 10 * timed_custom < 9 * median * n_calls[0])):
            # the judged calls launched custom kernels (a median of ``median`` each); the timed calls none, or
            # markedly fewer: the time is not that of what was judged. A timing finding, not a cheat: a path the
            # counters do not see (a CUDA graph the candidate replays) is honest, and gets no speedup either way
            _Job.flag(self, _finding("runtime.kernel-launch", "timing", "timed-path",
                                     f"the judged calls launched a median of {median} custom kernel(s) each "
                                     f"({judged[:8]}), the {n_calls[0]} timed calls {timed_custom} in all: "
                                     "what was timed is not what was judged"))
        self.sync()
        for j in range(k):  # inputs unchanged by the timed calls?
            for n, (buf, src) in enumerate(zip(sets[j], base[j])):
                if not _isinstance(buf, torch.Tensor):
                    continue
                want = (src if last_round[j] is None or not buf.is_floating_point()
                        else _timing.refresh_values(src, last_round[j], key=self.refresh_key))
                if not _same(buf, want):
                    _Job.flag(self, _finding("runtime.input-mutation", "cheat", "input-mutation",
                                             f"forward wrote into input {n} during timing (set {j})"))
        # the in-place re-check writes into set 0's buffers; the others go back (with ``base``) before it
        self.timing_buffers = sets[:1]
        if odd:
            _Job.flag(self, _finding("runtime.non-plain-tensor", "cheat", "non-plain-tensor",
                                     f"a timed call returned a {odd[0]}, not a plain torch.Tensor"))
        self.check_integrity("after timing")
        if self.device.type == "cuda":
            # the other timing copies go back before the trusted side judges the timed output (its float64
            # judging beside them ran out of memory on an H200 for a 6 GiB level-1 problem, session 12);
            # the loop's last items (a base set, a buffer, a refreshed copy) with them
            want = buf = src = None
            base.clear()
            del sets[1:]
            _timing._empty_cache()
        msg: dict[str, Any] = {"event": "timing", "stats": stats.to_dict(), "info": info}
        if "out" in timed:
            self.out_cursor = 0
            descs = [self.describe_output(o, f"out_timed_{trial[0]}_{n}.bin")
                     for n, o in enumerate(_flatten(timed["out"]))]
            msg["timed"] = {"set": timed["set"], "round": last_round[timed["set"]], "descs": descs}
            # described: the timed output goes back before the trusted side judges it (a large job's
            # turns; the timing buffer kept for the in-place re-check stays, and is counted)
            timed.pop("out", None)
            self.release_large()
        _Job.send(self, msg)

    def recheck(self, idx: int, inplace: bool) -> None:
        """Fresh values; with ``inplace`` they are copied into the buffers used during timing, so a
        result cache keyed on pointers or tensor identity returns stale output (EXPLOITS K-16)."""
        if self.device.type == "cuda":
            # timing's other copies are gone: their memory goes back for the trusted side's comparison
            # (L1/19 on an H200: 24 GiB of timing copies kept, the trusted side out of memory judging)
            _timing._empty_cache()
        fresh = self.load_set(idx)
        if inplace and getattr(self, "timing_buffers", None):
            bufs = self.timing_buffers[0]
            for b, f in zip(bufs, fresh):
                if _isinstance(b, torch.Tensor) and _isinstance(f, torch.Tensor) and b.shape == f.shape:
                    b.copy_(f)
            self.run_trial(idx, args=list(bufs), where="recheck_inplace")
            for n, (b, f) in enumerate(zip(bufs, fresh)):
                if _isinstance(b, torch.Tensor) and _isinstance(f, torch.Tensor) and b.shape == f.shape and \
                        not _same(b, f.to(b.dtype)):
                    _Job.flag(self, _finding("runtime.input-mutation", "cheat", "input-mutation",
                                             f"forward wrote into input {n} (recheck in the timing buffers)"))
        else:
            self.run_trial(idx, where="recheck")


#: the names of the job object's methods: an attribute of the object under one of them shadows it (_Job.send)
#: modules whose code starting a thread (a library's worker pool) is not the candidate's deferred work
_LIBRARY_THREADS = ("torch", "triton", "numpy", "multiprocessing", "logging")

_JOB_METHODS = frozenset(k for k, v in vars(_Job).items() if callable(v) or isinstance(v, (staticmethod, classmethod)))


class _PoisonEmpty(torch.overrides.TorchFunctionMode):
    """Uninitialised tensors (``torch.empty`` and kin) come filled: NaN (floating), zero (integers and
    booleans, so that indices stay in range and a skipped kernel cannot cause a device-side assert). Used for the kernel-ablation call, where an output a skipped kernel should have written
    must not pass for one it did write (fresh pages are zeros, which is some kernels' answer)."""

    _EMPTY = (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func in self._EMPTY and _isinstance(out, torch.Tensor):
            if out.is_floating_point() or out.is_complex():
                out.fill_(float("nan"))
            else:  # zero: an index a skipped kernel should have written stays in range (no device assert)
                out.fill_(0)
        return out


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values (NaN equal to NaN) and shape."""
    if a.shape != b.shape:
        return False
    if _equal(a, b):
        return True
    return bool(a.is_floating_point() and _equal(a.isnan(), b.isnan()) and _equal(a.nan_to_num(), b.nan_to_num()))


def run_job(chan: Channel, job: dict[str, Any]) -> int:
    """Run one job (mode ``build``, ``eval`` or ``compile_ext``) over ``chan``; returns the process exit code."""
    if job.get("mode") == "compile_ext":
        # the build pool's compile of a shared extension: no candidate code, the binary is never loaded here
        cache = job.get("build_cache")
        chan.send(compile_shared_extension(str(job["name"]), job["args"], Path(job["build_dir"]),
                                           Path(cache) if cache else None, pch=bool(job.get("pch"))))
        return 0
    j = _Job(chan, job)
    if job.get("mode") == "probe":
        try:
            if j.device.type == "cuda":
                torch.cuda.init()
                x = torch.ones(4, device=j.device)
                ok = float(x.sum().item()) == 4.0
            else:
                ok = True
            chan.send({"event": "probe", "ok": ok})
        except BaseException as e:
            chan.send({"event": "probe", "ok": False, "error": f"{type(e).__name__}: {e}"[:2000]})
        return 0
    try:
        # the trusted side asks for the build once it holds the device again (DeviceEvaluator._run_candidate):
        # the candidate's code runs from here on
        if job.get("build_cmd") and chan.recv().get("cmd") != "build":
            return 0
        mod = j.build()
        if mod is None or job.get("mode") == "build":
            return 0
        # the trusted side says when to go on: between its messages this process does no GPU work, so
        # another slot's timing window on the same device can be let in there (DeviceEvaluator._gpu_yield)
        if chan.recv().get("cmd") != "construct":
            return 0
        j.construct(mod)
        j.sync()  # the model's set-up on the device is done before the answer (a yield point follows)
        _Job.send(j, {"event": "constructed", "weights": j.weights_info, "phase_s": j.phase_s})
        if chan.recv().get("cmd") == "next":
            for idx in range(int(job["n_correct"])):
                j.run_trial(idx)
                cmd = chan.recv()
                if cmd.get("cmd") != "next":
                    break
        # on a set the process holds already (staged sets keep only the latest): a request for another
        # would reach the trusted side after it sent its next command, not while it waits for one
        j.watch_precision(next(iter(j.sets_cache), 0))
        j.sync()
        # its findings went before this answer; after it, this process waits (the trusted side may give the
        # device to another slot's timing window there)
        _Job.send(j, {"event": "watched"})
        while True:
            cmd = chan.recv()
            c = cmd.get("cmd")
            if c == "profile":
                _Job.send(j, {"event": "profile", "profile": j.profile_kernels(int(cmd.get("set", 0)))})
            elif c == "time":
                j.time_it(cmd.get("timer"))
            elif c == "recheck":
                j.recheck(int(cmd["set"]), bool(cmd.get("inplace", False)))
            elif c == "ablate":
                j.ablate(int(cmd["set"]), int(cmd["round"]))
            elif c == "finish":
                j.check_integrity("at the end")
                _Job.send(j, {"event": "done", "phase_s": j.phase_s, "build": j.record.to_dict(),
                              "triton": dict(j.launches.names), "device_peak_bytes": _device_peak_bytes()})
                return 0
            else:
                return 0
    except BaseException as e:  # candidate failure at run time: report and exit
        try:
            _Job.send(j, {"event": "error", "kind": _classify_exception(e), "error": _tail(traceback.format_exc())})
        except Exception:
            pass
        return 1


# device activities that are waits or markers, not work: CUDA synchronisation records (Kineto's "cuda_sync":
# "Context Sync", "Stream Sync", "Event Sync", "Stream Wait Event"...) and device-side user annotations
_NOT_WORK_ACTIVITIES = ("cuda_sync", "gpu_user_annotation", "overhead", "cuda_runtime", "cuda_driver")
_NOT_WORK_NAMES = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "Context Sync",
                   "Stream Sync", "Event Sync", "Stream Wait Event", "Device Sync")


def device_times(events: Any, cuda: Any) -> dict[str, float]:
    """Summed device time per name of the device work among profiler ``events``, in microseconds.

    Counted: events whose ``device_type`` is ``cuda`` (``torch.autograd.DeviceType.CUDA``): kernels, and
    the copies and fills (``Memcpy ...``, ``Memset ...``) the profiler lists beside them. Not counted: user
    annotations and synchronisation waits (by Kineto's activity type where the event has one, else by
    name), which take device time without doing work. An event's time is its device interval
    (``time_range``, microseconds), else its ``device_time_total`` / ``cuda_time_total``.

    Args:
        events: profiler ``FunctionEvent`` objects (``prof.events()``), or objects with the same attributes.
        cuda: the ``DeviceType`` value of CUDA events.

    Returns:
        Name -> microseconds (rounded to 0.001 us), names in first-seen order; empty when there is none.
    """
    out: dict[str, float] = {}
    for ev in events:
        if getattr(ev, "device_type", None) != cuda or getattr(ev, "is_user_annotation", False):
            continue
        name = str(getattr(ev, "name", ""))
        kind = getattr(ev, "activity_type", None)
        if (isinstance(kind, str) and kind.lower() in _NOT_WORK_ACTIVITIES) or name.startswith(_NOT_WORK_NAMES):
            continue
        us: Any = None
        tr = getattr(ev, "time_range", None)
        try:
            if tr is not None:
                us = float(tr.end) - float(tr.start)
        except (TypeError, ValueError, AttributeError):
            us = None
        for attr in ("device_time_total", "cuda_time_total"):
            if isinstance(us, float) and us >= 0:
                break
            try:
                us = float(getattr(ev, attr))
            except (TypeError, ValueError, AttributeError):
                us = None
        if isinstance(us, float) and 0 <= us < float("inf"):
            out[name] = round(out.get(name, 0.0) + us, 3)
    return out


def child_main(sock_fd: int, job: dict[str, Any], sandbox: dict[str, Any] | None = None) -> int:
    """Entry point inside a forked or spawned candidate process.

    Args:
        sock_fd: connected socket to the trusted device worker.
        job: the job description (see :class:`~.device.DeviceEvaluator`).
        sandbox: :class:`~.sandbox.SandboxConfig` fields, applied before anything else.
    """
    from .sandbox import SandboxConfig, apply_sandbox

    sock = socket.socket(fileno=sock_fd)
    _become_subreaper()  # before any candidate code: its processes' orphans stay visible (_children)
    key = job.pop("channel_key", None)  # kept only by the channel object (see .channel.Channel)
    chan = Channel(sock, key=bytes.fromhex(key) if key else None)
    # every tool's scratch and cache goes into the private folder (the only place it may write)
    jd = Path(job["job_dir"])
    for sub in ("home", "tmp", "build", "cache"):
        (jd / sub).mkdir(parents=True, exist_ok=True)
    os.environ.update({"HOME": str(jd / "home"), "TMPDIR": str(jd / "tmp"), "TEMP": str(jd / "tmp"),
                       "TMP": str(jd / "tmp"), "XDG_CACHE_HOME": str(jd / "cache"),
                       "TORCH_EXTENSIONS_DIR": str(jd / "build"), "TRITON_CACHE_DIR": str(jd / "cache" / "triton"),
                       "TORCHINDUCTOR_CACHE_DIR": str(jd / "cache" / "inductor"),
                       "CUDA_CACHE_PATH": str(jd / "cache" / "nv"), "PYTHONPYCACHEPREFIX": str(jd / "cache" / "py")})
    import tempfile

    tempfile.tempdir = None
    applied: dict[str, str] = {}
    if sandbox:
        applied = apply_sandbox(SandboxConfig(**sandbox))
    log_path = Path(job["job_dir"]) / "child.log"
    fd = os.open(str(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.chdir(job["job_dir"])
    hello: dict[str, Any] = {"event": "hello", "pid": os.getpid(), "sandbox": applied}
    if job.get("mode") == "eval" and job.get("share"):
        # mapped before any candidate code runs, so whether it worked is the harness's own report
        hello["share_error"] = _map_shared(job)
    chan.send(hello)
    return run_job(chan, job)


#: the shared device buffers of this process's job, mapped by child_main: ("set", i) and ("out", 0)
_MAPPED: dict[tuple[str, int], torch.Tensor] = {}


def _map_shared(job: dict[str, Any]) -> str | None:
    """Map every buffer in ``job["share"]`` (see .devshare); None, or why it failed."""
    try:
        dev = torch.device(job["device"])
        share = job["share"]
        for i, d in enumerate(share["sets"]):
            _MAPPED[("set", i)] = _devshare.open_shared(str(d["handle"]), int(d["nbytes"]), dev)
        d = share["outputs"]
        _MAPPED[("out", 0)] = _devshare.open_shared(str(d["handle"]), int(d["nbytes"]), dev)
        return None
    except Exception as e:  # noqa: BLE001 - reported to the trusted side, which runs the job with files
        _MAPPED.clear()
        return f"{type(e).__name__}: {e}"[:500]


def _spawn_entry() -> None:
    """``python -m kernelbench_harness.execution.worker FD``: the spawn (non-zygote) start method."""

    fd = int(sys.argv[1])
    sock = socket.socket(fileno=os.dup(fd))
    ch = Channel(sock)
    msg = ch.recv()
    ch.close()
    code = child_main(fd, msg["job"], msg.get("sandbox"))
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    _spawn_entry()
