"""The trusted side of evaluation on one device: references, comparison, baselines, verdicts.

A :class:`DeviceEvaluator` owns one device (``cpu`` or one GPU, made the only visible one). For each
problem it draws the input sets itself (secret per-run seeds under the ``kbench`` protocol),
computes the reference outputs (and a float64 evaluation for the ``fp64-bound`` judge), and keeps
them. Each candidate runs in a fresh sandboxed process (:mod:`.worker`) that receives the inputs as
raw files and writes its outputs back as raw files; this process compares them and never imports
candidate code. Baselines (eager and torch.compile) are timed here with the same timing code the
candidate process uses (:mod:`.timing`).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import dataclasses
import hashlib
import secrets
import logging
import os
import shutil
import signal
import statistics
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch

from ..core import Candidate, EvalResult, Finding, Outcome, Problem, Severity, TimingStats
from ..protocols import Protocol
from . import devshare as _devshare
from . import timing as _timing
from .build import target_arch_list
from .channel import ChannelClosed, ChannelError, ChannelTimeout
from .guards import apply_tf32, cheat_findings, static_findings
from .kernelshare import custom_kernel_share, own_kernel_names, own_namespaces
from .process import ChildHandle, Launcher
from .quiet import in_tree, proc_stat
from .sandbox import clean_environment, site_write_dirs
from .scratch import HostDeviceLock, claim_scratch, device_lock_key, flock_holders, release_fd
from .tensorio import LARGE_SET_BYTES, DTYPES, TensorFormatError, encode_value, nbytes_of, read_tensor, tensor_name, write_tensor
from .tritonseed import TritonSeed, make_seed, plant_seed
from .verify import Comparison, compare_outputs, extra_check_verdict, flatten_outputs, lower_precision_bound_ok
from .warm import module_nbytes, stable_compile_cache_keys, tensor_nbytes

__all__ = ["EvalJob", "DeviceEvaluator", "ProblemContext", "ReferenceError_"]

log = logging.getLogger(__name__)

_DTYPE = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_UNSET = object()  # not read yet

START_OFF_HOLD_ENV = "KBENCH_START_OFF_HOLD"


def start_off_hold_enabled() -> bool:
    """Whether ``KBENCH_START_OFF_HOLD`` lets a candidate's process start (sandbox, imports, its CUDA context
    made, the shared buffers mapped: about 0.6 s a job on an H200) run with its slot's shared hold on the
    device's host lock given up, so that another slot's timing window queued meanwhile need not wait for it.
    Unset: no (the start holds the lock, as before). Off until measured: whether a context being made in
    another process moves a window's timing is not known (in H200 session 20's attempt with
    ``scripts/gpu/context_noise.py`` none of the processes it started ended while a block was timed, so it
    shows nothing about contexts), nor is the sweep's gain.

    Raises:
        ValueError: a value other than an on/off switch (:func:`..envflags.env_switch`).
    """
    from ..envflags import env_switch

    return env_switch(START_OFF_HOLD_ENV, default=False)


COMPILE_OFF_HOLD_ENV = "KBENCH_COMPILE_OFF_HOLD"
LANE_PRIORITY_ENV = "KBENCH_LANE_PRIORITY"


def lane_priority_enabled() -> bool:
    """Whether ``KBENCH_LANE_PRIORITY`` gives the run's large job (the lane: one at a time per GPU, whose chain
    set the wall of every whole sweep on an H200, sessions 18-27) the device while it computes: another slot's
    timing window then waits to be queued until the large job gives its shared hold up (a stretch of host work,
    its own timing window, a wait for memory, its end; at most :attr:`DeviceEvaluator.LANE_WAIT_MAX_S`), instead
    of stopping it at its next step. The windows then go on while the large job works on the host (its process
    starting, its build, a Triton compile, its reference's host work). Unset: yes (since session 29). In session
    27's cached sweep each large job waited 2.65 s of its 10.35 s for other slots' windows; two pairs of whole
    cached sweeps on one H200, each pair from the same store state, took 544.0 s off and 530.5 s on (session
    28) and 562.7 s off and 521.8 s on (session 29), from the run's row. In both pairs the sweep with it ran
    second. Changes nothing in what is measured: every window still has the device to itself.

    Raises:
        ValueError: a value other than an on/off switch (:func:`..envflags.env_switch`).
    """
    from ..envflags import env_switch

    return env_switch(LANE_PRIORITY_ENV, default=True)


LANE_EXCLUSIVE_ENV = "KBENCH_LANE_EXCLUSIVE"


def lane_exclusive_enabled() -> bool:
    """Whether ``KBENCH_LANE_EXCLUSIVE`` (with :func:`lane_priority_enabled`) also holds the other slots' untimed
    device work back while the lane's large job computes: a slot whose job is not the lane's gives its shared
    hold up at its next step (as for a queued window, :meth:`DeviceEvaluator._gpu_yield`) and takes it back once
    the large job gives the device up (a stretch of host work, its own window, its end; each wait at most
    :attr:`DeviceEvaluator.LANE_WAIT_MAX_S`); a job does not start its device work meanwhile either. The small
    jobs then work while the large job is on the host. Unset: no. Off until measured: on one H200 (session 31)
    large elementwise level-1 jobs took 4.98-5.40 s with nothing beside them and 8.4-12.2 s inside the six-slot
    cached sweeps, whose wall is their chain; whether the sweep gains more than the small jobs lose is not
    known. Changes nothing in what is measured: every window still has the device to itself.

    Raises:
        ValueError: a value other than an on/off switch (:func:`..envflags.env_switch`).
    """
    from ..envflags import env_switch

    return env_switch(LANE_EXCLUSIVE_ENV, default=False)


def compile_off_hold_enabled() -> bool:
    """Whether ``KBENCH_COMPILE_OFF_HOLD`` lets a timing window that another slot queued go on while this
    slot's candidate compiles a Triton kernel inside one of its correctness calls (the first call of a fresh
    process JIT-compiles every Triton kernel it launches: 0.6-1.1 s a candidate on an H200 host in session
    20, all of it host work, held under the slot's shared hold before). The candidate's process announces
    each compile (``{"event": "host_work"}``, from Triton's ``jit_cache_hook`` and
    ``jit_post_compile_hook``, after a device synchronisation); meanwhile the trusted side treats the call
    as a step of host work: a queued window gets the device with the process stopped where it is
    (:meth:`DeviceEvaluator._gpu_yield` with ``midstep``). Unset: yes.

    Raises:
        ValueError: a value other than an on/off switch (:func:`..envflags.env_switch`).
    """
    from ..envflags import env_switch

    return env_switch(COMPILE_OFF_HOLD_ENV, default=True)


def share_plan(n_sets: int, set_nbytes: int, out_nbytes: int, total_memory: int, fraction: float) -> str | None:
    """How a candidate's input sets reach its process through shared device memory: ``"all"`` (one
    buffer per set) when every set plus the output buffer fits in ``fraction`` of the device's memory,
    ``"staged"`` (one buffer, filled with the set asked for) when one set plus the output buffer does,
    else None (files). Sizes in bytes."""
    cap = fraction * total_memory
    if n_sets * set_nbytes + out_nbytes <= cap:
        return "all"
    if set_nbytes + out_nbytes <= cap:
        return "staged"
    return None


#: of the device's memory, the most a candidate's timing copies of its input sets may take (each set is
#: copied twice: the buffers timed, and their values for the re-check)
TIMING_SETS_FRACTION = 0.25


def timing_set_count(rotate_inputs: int, n_correct: int, set_nbytes: int, total_memory: int | None) -> int:
    """How many input sets a candidate's timing cycles through: ``rotate_inputs`` (at most the sets
    there are), but no more than two copies of each, plus one more set (the copy it was loaded into),
    fit in ``TIMING_SETS_FRACTION`` of the device's ``total_memory`` (bytes; None off a GPU), and at
    least one. Three rotating 16 GiB sets of current
    KernelBench's L1/45 would take 96 GiB of copies in the candidate's process, beside the shared
    buffers and the trusted side's own."""
    k = min(rotate_inputs, n_correct) or 1
    if total_memory and set_nbytes > 0:
        k = min(k, int((TIMING_SETS_FRACTION * total_memory // set_nbytes - 1) // 2))
    return max(1, k)


def planned_memory(device: torch.device, share: float) -> int:
    """Bytes of CUDA ``device``'s memory one slot plans for: ``share`` (1/N with N slots on it) of the total."""
    return int(torch.cuda.get_device_properties(device).total_memory * share)


class OutputTooLarge:
    """Stands for a candidate's output when its outputs for one call describe more bytes than the limit
    (:meth:`DeviceEvaluator._read_outputs`): not a tensor, so the comparison fails on it."""

    def __init__(self, nbytes: int, limit: int) -> None:
        self.nbytes, self.limit = nbytes, limit

    def __repr__(self) -> str:
        return f"<outputs of {self.nbytes} bytes, over the limit of {self.limit} bytes>"


def _described_nbytes(d: Any) -> int:
    """Bytes of one output description's tensor (a file or the shared buffer); 0 for other values and
    descriptions too malformed to size (reading them reports those)."""
    if not isinstance(d, dict) or not ("file" in d or "shared" in d):
        return 0
    try:
        return nbytes_of(DTYPES[str(d["dtype"])], [max(0, int(x)) for x in d["shape"]][:64])
    except Exception:  # noqa: BLE001 - reported when read
        return 0


#: the largest norm-wise relative difference between a twin built anew and the reference, by the run's dtype: a
#: few units of the dtype's rounding (``torch.finfo(dtype).eps``: 1.2e-7, 9.8e-4, 7.8e-3) summed over a
#: computation. The twin's difference from the reference feeds the judge's bound, so a twin that computes
#: something else (a constant or a permutation drawn again in ``__init__``) must not pass; one rejected here is
#: dropped and the problem judged with allclose, as before twins built anew existed
FRESH_TWIN_RTOL = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 3e-2}


def _check_fresh_twin(ref: list[Any], out64: list[Any], dtype: torch.dtype) -> None:
    """Raise RuntimeError unless the float64 twin's outputs ``out64`` (set 0) agree with the reference's ``ref``
    at the run's ``dtype``: each floating tensor within :data:`FRESH_TWIN_RTOL` norm-wise (NaN and Inf where the
    reference has them), every other output equal."""
    if len(ref) != len(out64):
        raise RuntimeError(f"the float64 twin built anew returns {len(out64)} outputs, the reference {len(ref)}")
    rtol = FRESH_TWIN_RTOL.get(dtype, 1e-3)
    for i, (r, o) in enumerate(zip(ref, out64)):
        if isinstance(r, torch.Tensor) and isinstance(o, torch.Tensor) and r.is_floating_point():
            if r.shape != o.shape:
                raise RuntimeError(f"the float64 twin built anew gives output {i} shape {tuple(o.shape)}, the "
                                   f"reference {tuple(r.shape)}")
            a, b = r.to(torch.float64), o.to(device=r.device, dtype=torch.float64)  # both detached already
            fin = torch.isfinite(a)
            if not torch.equal(fin, torch.isfinite(b)) or not torch.equal(a[~fin].nan_to_num(0.0),
                                                                         b[~fin].nan_to_num(0.0)):
                raise RuntimeError(f"the float64 twin built anew has NaN or Inf elsewhere than the reference "
                                   f"(output {i})")
            diff = float((a[fin] - b[fin]).norm())
            scale = float(b[fin].norm())
            if diff > rtol * scale + 1e-12:
                raise RuntimeError(f"the float64 twin built anew disagrees with the reference (output {i}: "
                                   f"|ref - twin| = {diff:.3g}, |twin| = {scale:.3g}); something its __init__ "
                                   "draws besides its weights and buffers differs")
        elif isinstance(r, torch.Tensor) and isinstance(o, torch.Tensor):
            if r.shape != o.shape or not torch.equal(r.cpu(), o.cpu()):
                raise RuntimeError(f"the float64 twin built anew gives another output {i} than the reference")
        elif not (type(r) is type(o) and r == o):
            raise RuntimeError(f"the float64 twin built anew gives another output {i} than the reference")


def host_module_copy(model: Any) -> Any:
    """A deep copy of ``model`` whose tensors are host (CPU) copies of its own, made without a second copy on
    the device: each tensor is copied to the host first and handed to ``copy.deepcopy``'s memo, so a parameter
    shared by two submodules stays one parameter. Covered: parameters (kept ``nn.Parameter``, with their
    ``requires_grad``), buffers, and tensors a submodule holds as plain attributes, directly or in a list,
    tuple or dict (KernelBench's L3/33 keeps its hidden state as ``self.hidden``). Anything other than a
    ``torch.nn.Module`` is deep-copied as it is.

    Raises:
        Whatever copying a tensor raises (e.g. a lazy module's uninitialised parameter).
    """
    return module_copy(model, lambda t: t.detach().to("cpu", copy=True), plain=True)


def module_copy(model: Any, fn: Callable[[torch.Tensor], torch.Tensor], plain: bool = False) -> Any:
    """A deep copy of ``model`` (a ``torch.nn.Module``; anything else is deep-copied as it is) whose parameters
    and buffers are ``fn`` of its own, each made once and handed to ``copy.deepcopy``'s memo (a tensor shared
    by two submodules stays one tensor; parameters stay ``nn.Parameter`` with their ``requires_grad``), so no
    other copy of them is made. ``plain``: tensors a submodule holds as plain attributes (directly or in a
    list, tuple or dict) too; without it, a tensor held only that way is deep-copied as it is, as
    ``Module._apply`` leaves it (one that is also a parameter or buffer is the copy's ``fn`` of it).

    Raises:
        Whatever ``fn`` raises.
    """
    if not isinstance(model, torch.nn.Module):
        return copy.deepcopy(model)
    memo: dict[int, Any] = {}

    def add(t: Any) -> None:
        if not isinstance(t, torch.Tensor) or id(t) in memo:
            return
        new = fn(t)
        memo[id(t)] = torch.nn.Parameter(new, requires_grad=t.requires_grad) \
            if isinstance(t, torch.nn.Parameter) else new

    for m in model.modules():  # its attributes: _parameters and _buffers (dicts) and the plain ones
        for name, v in vars(m).items():
            if not plain and name not in ("_parameters", "_buffers"):
                continue
            for t in (v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else (v,)):
                add(t)
    return copy.deepcopy(model, memo)


def _host_build_hint(weights: Any, protocol: Protocol) -> str:
    """What an incorrect verdict's message adds where the candidate's ``ModelNew`` could not be built on the
    device (``weights.device_build_error``) and was built on the host, whose generator draws other values than the
    device's: the weights the ``state_dict`` did not carry (all of them under ``weights=reseed``) then differ from
    the reference's. Empty otherwise."""
    if not isinstance(weights, dict) or not weights.get("device_build_error"):
        return ""
    if protocol.weights == "reseed":
        which = "every weight (weights=reseed carries none)"
    elif weights.get("n_skipped"):
        which = f"the {weights['n_skipped']} weight(s) the state_dict did not carry"
    else:
        return ""
    return (f" [ModelNew failed to build on the device ({weights['device_build_error']}) and was built on the host, "
            f"whose generator draws other values than the reference's device draw: {which} differ from the "
            f"reference's; make ModelNew's __init__ work inside torch.device(<GPU>), or run with "
            f"-P weights_device=cpu]")


def weights_on_device(protocol: Protocol, device: torch.device) -> bool:
    """Whether the reference is built on ``device`` (``protocol.weights_device == "device"`` on a CUDA device)."""
    return protocol.weights_device == "device" and device.type == "cuda"


def _device_oom(e: BaseException) -> bool:
    """Whether ``e`` is the device running out of memory: ``torch.OutOfMemoryError``, a CUDA error the driver
    reports as out of memory (``cudaErrorMemoryAllocation`` through ``torch.AcceleratorError``), or a CUDA
    library's failed allocation (``CUBLAS_STATUS_ALLOC_FAILED``, cuDNN's and cuSOLVER's alike: a handle or
    workspace the device had no room for, beside other slots' work). Such a failure of the reference is the
    harness's (tried again), not the problem's (``reference-failed``, which scores the problem apart)."""
    if isinstance(e, torch.OutOfMemoryError):
        return True
    text = str(e)
    return type(e).__name__ in ("AcceleratorError", "RuntimeError") and ("out of memory" in text
                                                                        or "_ALLOC_FAILED" in text)


#: per device: the most the allocator held before a measurement inside the job reset the count
#: (:func:`_peak_during`); :func:`_device_peak` folds it in
_PEAK_FLOOR: dict[str, int] = {}


def _device_peak(device: torch.device, reset: bool = False) -> int | None:
    """The most device memory this process's caching allocator has held on ``device`` since the last reset
    (bytes, ``torch.cuda.max_memory_reserved``, counting what :func:`_peak_during` measured in between); with
    ``reset``, starts a new count and returns None. None on a CPU device or where the count cannot be read."""
    if device.type != "cuda":
        return None
    try:
        if reset:
            torch.cuda.reset_peak_memory_stats(device)
            _PEAK_FLOOR.pop(str(device), None)
            return None
        return max(int(torch.cuda.max_memory_reserved(device)), _PEAK_FLOOR.get(str(device), 0))
    except Exception:  # noqa: BLE001 - a figure for the record, not a check
        return None


#: running peaks (absolute allocated bytes) of the :func:`_peak_during` measurements in progress, outermost
#: first: an inner measurement's reset must not lose what an outer one had seen
_ACTIVE_PEAKS: list[list[int]] = []


def _peak_during(device: torch.device, fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` and the most device memory it had allocated at once beyond what was allocated before it
    (bytes, ``torch.cuda.max_memory_allocated``: its outputs included). 0 on a CPU device or where the count
    cannot be read. Measurements nest; the job's own high-water mark (:func:`_device_peak`) keeps what it
    had reached. Whatever ``fn`` raises propagates.
    """
    if device.type != "cuda":
        return fn(), 0
    try:
        torch.cuda.synchronize(device)
        base = int(torch.cuda.memory_allocated(device))
        seen = int(torch.cuda.max_memory_allocated(device))
        for m in _ACTIVE_PEAKS:
            m[0] = max(m[0], seen)
        key = str(device)
        _PEAK_FLOOR[key] = max(_PEAK_FLOOR.get(key, 0), int(torch.cuda.max_memory_reserved(device)))
        torch.cuda.reset_peak_memory_stats(device)
    except Exception:  # noqa: BLE001 - a figure for planning, not a check
        return fn(), 0
    mine = [base]
    _ACTIVE_PEAKS.append(mine)
    try:
        out = fn()
    finally:
        for k in range(len(_ACTIVE_PEAKS) - 1, -1, -1):  # by identity: two may hold equal values
            if _ACTIVE_PEAKS[k] is mine:
                del _ACTIVE_PEAKS[k]
                break
    try:
        torch.cuda.synchronize(device)
        return out, max(0, max(int(torch.cuda.max_memory_allocated(device)), mine[0]) - base)
    except Exception:  # noqa: BLE001
        return out, 0


def _not_judged(e: BaseException) -> str:
    """What a result's ``extra["integrity_checks"]`` says of a check the trusted side could not judge."""
    oom = _device_oom(e) or bool(getattr(e, "oom", False))
    return "not judged: " + ("out of device memory" if oom else f"{type(e).__name__}: {str(e)[:200]}")


class HostLockLost(RuntimeError):
    """A slot could not take its shared hold on the device's host lock back after giving it up (the lock files went
    away or cannot be opened): the harness's failure. Whatever catches failures of the problem's own code lets it
    through: the slot must not go on computing without the hold, nor judge with a weaker judge because of it."""


#: the problem flag of a problem whose reference failed at set-up, before any candidate code ran (not out of memory):
#: reports score such problems apart, as the audit's ``degenerate`` ones (``reporting.data.SCORED_APART``)
REFERENCE_FAILED = "reference-failed"


class ReferenceError_(RuntimeError):
    """The problem's own reference failed (bad problem file, unsupported op on this device); ``oom``: the
    trusted side ran out of device memory evaluating it (beside the candidate's process)."""

    def __init__(self, message: str, oom: bool = False) -> None:
        super().__init__(message)
        self.oom = oom


@dataclass(frozen=True, slots=True)
class EvalJob:
    """One candidate to evaluate.

    Attributes:
        problem, candidate: what to evaluate.
        protocol: the run's protocol.
        run_seed: the run's secret seed (input sets and weights derive from it under ``kbench``).
        baselines: headline baseline times already known (from the store), by mode name:
            ``"eager"``, ``"compile:default"``...; missing modes are measured here.
        baseline_info: how each of ``baselines`` was measured (its stored timing info, by mode; None or
            missing: not known): a baseline whose time the host set marks the problem ``host-bound`` as one
            measured here does (:func:`host_bound_callables`).
        timeout_s: wall-clock limit for running the candidate (after its build).
        build_timeout_s: wall-clock limit for importing the candidate (compiling its extensions).
        large: scheduling only: one of the run's large problems (:data:`..schedule.LANE_BYTES`), which
            the local executor runs one per GPU at a time, ahead of the others (see
            :class:`..executors.base.AffinityQueue`), and whose memory the ledger keeps for the next one (the
            lane's reserve, :mod:`.execution.memledger`). Changes nothing in what is measured or judged.
    """

    problem: Problem
    candidate: Candidate
    protocol: Protocol
    run_seed: int = 0
    baselines: dict[str, TimingStats] = field(default_factory=dict)
    baseline_info: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 300.0
    build_timeout_s: float = 900.0
    large: bool = False


def _derive_seed(*parts: Any) -> int:
    h = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:4], "little")


def _exec_problem(problem: Problem) -> types.ModuleType:
    mod = types.ModuleType(f"kb_problem_L{problem.level}_{problem.problem_id}")
    try:
        exec(compile(problem.code, problem.source or problem.file_name, "exec"), mod.__dict__)
    except Exception as e:
        raise ReferenceError_(f"problem file fails to run: {type(e).__name__}: {e}") from None
    return mod


def _to_device(vals: list[Any], device: torch.device, dtype: torch.dtype, cast_all: bool) -> list[Any]:
    out = []
    for v in vals:
        if isinstance(v, torch.Tensor):
            v = v.to(device)
            if v.is_floating_point() or cast_all:
                v = v.to(dtype)
        out.append(v)
    return out


def _upcast(vals: list[Any], device: torch.device) -> list[Any]:
    """``vals`` for the float64 twin: every tensor on ``device``, floating ones as float64, never one of
    ``vals``' own tensors (a float64 or integer tensor already on ``device`` is cloned), so that a
    reference writing into its inputs does not change them."""
    out = []
    for v in vals:
        if isinstance(v, torch.Tensor):
            u = v.to(device)
            u = u.double() if u.is_floating_point() else u
            v = u.clone() if u is v else u
        out.append(v)
    return out


def _judging_copies(vals: list[Any], dtype: torch.dtype, cast_all: bool) -> tuple[int, int]:
    """``(upcast, refresh)`` bytes of input set ``vals`` (its top-level tensors) for a lazy judging at run
    precision ``dtype``: its float64 upcast (:func:`_upcast`: floating tensors at 8 bytes an element, others
    as they are), and what refreshing it for a timed round holds beyond the set (:meth:`ProblemContext.compare_on`:
    the copies :func:`_cast_set` makes, then per refreshed element :func:`.timing.refresh_values`' buffers:
    one of the run's precision, or for half precision a float32 copy, a float32 buffer and the result)."""
    item = dtype.itemsize
    upcast = refresh = 0
    for v in vals:
        if not isinstance(v, torch.Tensor):
            continue
        # (under cast_all a refreshed set's integers are upcast from their floating copies: 8 bytes too)
        upcast += v.numel() * 8 if v.is_floating_point() or cast_all else v.numel() * v.element_size()
        if v.is_floating_point() or cast_all:
            refresh += v.numel() * ((item if v.dtype != dtype else 0) + (item if item >= 4 else 8 + item))
    return upcast, refresh


def _fresh_on(vals: list[Any], device: torch.device) -> list[Any]:
    """``vals`` with every tensor copied to ``device`` at its own dtype: one copy per tensor (one
    host-to-device transfer for a tensor on the host), also where it is on ``device`` already (the
    CPU), so that nothing a reference writes into its inputs reaches the input set as stored."""
    return [v.to(device, copy=True) if isinstance(v, torch.Tensor) else v for v in vals]


def _cast_set(vals: list[Any], dtype: torch.dtype, cast_all: bool) -> list[Any]:
    """``vals`` (on the device already) at the run's precision: floating tensors, or every tensor when
    ``cast_all``, cast to ``dtype`` (the very tensor where it has that dtype), others as they are."""
    return [v.to(dtype) if isinstance(v, torch.Tensor) and (v.is_floating_point() or cast_all) else v
            for v in vals]



def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-equal values, NaN equal to NaN (a reference that returns NaN is still deterministic)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num()))
    return bool(torch.equal(a, b))


def _same_values(a: Any, b: Any) -> bool:
    """Two draws of one input set hold the same values: tensors bit for bit (NaN where NaN) on the same
    device, lists, tuples and dicts item by item, anything else by ``==`` (NaN equal to NaN). A
    comparison that raises counts as different."""
    try:
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.device == b.device
                    and _same_tensor(a, b))
        if type(a) is not type(b):
            return False
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(_same_values(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return list(a) == list(b) and all(_same_values(a[k], b[k]) for k in a)
        if isinstance(a, float) and a != a:
            return b != b
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an object without a usable ==: not shown to repeat
        return False


def _shares_tensor(a: Any, b: Any) -> bool:
    """Whether two draws hand out one and the same tensor object (a tensor ``get_inputs`` keeps)."""
    ids = {id(t) for t in _tensors_in(a)}
    return any(id(t) in ids for t in _tensors_in(b))


def _tensors_in(v: Any) -> list[torch.Tensor]:
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _tensors_in(x)]
    if isinstance(v, dict):
        return [t for x in v.values() for t in _tensors_in(x)]
    return []


def _detach_outputs(out: Any) -> list[Any]:
    """The reference's outputs flattened, each tensor detached, and copied out where it and the other outputs on
    its storage keep a much larger storage alive (:func:`_compact`)."""
    flat = [o.detach() if isinstance(o, torch.Tensor) else o for o in flatten_outputs(out)]
    return _compact(flat)


#: outputs whose storage is larger than their own bytes by at least this much are copied out
_COMPACT_MIN_EXTRA_BYTES = 1 << 20


def _compact(outs: list[Any]) -> list[Any]:
    """``outs`` with each tensor copied to a storage of its own where the outputs on its storage (the pieces of
    one ``split``, say) keep :data:`_COMPACT_MIN_EXTRA_BYTES` or more beyond their own bytes alive; the values,
    dtypes and shapes are the same. Tensors without a plain storage are left as they are.

    ``torch.nn.functional.smooth_l1_loss`` (KernelBench L1/96) returns a 0-dim mean whose storage is the whole
    elementwise buffer: six stored references and their float64 twins held 72 GiB of an H200 for a scalar
    output, which the memory plan counted as 72 bytes (H200 session 17: the candidate ran out of memory with
    the whole device claimed)."""
    groups: dict[tuple[Any, int], list[int]] = {}
    for i, o in enumerate(outs):
        if isinstance(o, torch.Tensor):
            try:
                st = o.untyped_storage()
                groups.setdefault((o.device, st.data_ptr()), []).append(i)
            except (RuntimeError, NotImplementedError):  # no plain storage (sparse, nested): as it is
                continue
    out = list(outs)
    for idx in groups.values():
        kept = outs[idx[0]].untyped_storage().nbytes()
        own = sum(outs[i].numel() * outs[i].element_size() for i in idx)
        if kept - own >= _COMPACT_MIN_EXTRA_BYTES:
            for i in idx:
                out[i] = outs[i].clone()
    return out


def _to_host(x: Any) -> Any:
    """``x`` with every tensor in it (nested lists, tuples and dicts too) copied to the CPU."""
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_host(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_host(v) for k, v in x.items()}
    return x


def draw_inputs(mod: Any, seed: int, device: torch.device | None) -> tuple[list[Any], str]:
    """One input set: ``mod.get_inputs()`` after ``torch.manual_seed(seed)``.

    Args:
        mod: the problem's module (``get_inputs()`` returns a list of tensors and numbers).
        seed: the set's seed (seeds every device's generator).
        device: draw with ``device`` as torch's default device, so tensors that ``get_inputs`` creates
            without naming a device are made there (a GPU draws a 6.4 GB ``randn`` in milliseconds
            where the CPU takes seconds); None draws on the CPU. The values differ from a CPU draw
            with the same seed; they repeat with the same seed on the same GPU model and torch
            version (CUDA's generators depend on the number of SMs), which a run's hardware and
            software fingerprints pin.

    Returns:
        ``(values, where)``: the values as ``get_inputs`` returned them (on ``device`` when drawn
        there) and ``"device"``, or ``"cpu"`` when drawn on the CPU, including after ``get_inputs``
        failed on ``device`` (it converts to NumPy, say, or the device is out of memory).

    Raises:
        ReferenceError_: ``get_inputs()`` fails on the CPU.
    """
    if device is not None:
        torch.manual_seed(seed)
        try:
            with torch.device(device):
                return list(mod.get_inputs()), "device"
        except Exception as e:  # drawn on the CPU below, as every protocol did before input_device
            log.info("get_inputs() on %s failed (%s: %s); drawing on the CPU", device, type(e).__name__, e)
    torch.manual_seed(seed)
    try:
        return list(mod.get_inputs()), "cpu"
    except Exception as e:
        raise ReferenceError_(f"get_inputs() fails: {type(e).__name__}: {e}") from None


def _rng_state(device: torch.device) -> tuple[Any, Any]:
    """The CPU generator's state and, on CUDA, ``device``'s."""
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def _set_rng_state(device: torch.device, state: tuple[Any, Any]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


class ProblemContext:
    """Reference state for one problem under one protocol and run seed (inputs, outputs, weights).

    Reference outputs are *stored* (``refs``, and their float64 twins ``refs64`` for the
    ``fp64-bound`` judge, one list per input set) when keeping them all on the device costs no more
    than ``ref_budget_bytes``; above it the context is *lazy* (``lazy_refs``): it keeps none, and
    :meth:`compare` evaluates the set's reference (and float64 twin) again on the device, judges and
    frees them. Set 0's reference is always computed at set-up, twice (the nondeterminism check; its
    outputs give ``out_nbytes`` and the estimate); in lazy mode the other sets' are never computed there. A reference flagged
    ``nondeterministic-reference`` cannot be evaluated again (another draw differs), so it always
    keeps its run-precision ``refs`` stored whatever the budget, and never gets ``refs64`` (its judge
    falls back to ``allclose``, which does not use them).

    Args:
        ref_budget_bytes: the most device memory the stored references may take, in bytes (None:
            :meth:`reference_budget_bytes` for ``device``).

    Attributes:
        lazy_refs: references are evaluated at each comparison instead of stored.
        ref_estimate_bytes: what storing every set's references costs on the device, in bytes
            (``n_sets`` times set 0's outputs at their own dtypes, plus their float64 twins when the
            ``fp64-bound`` judge stores them).

    Raises:
        ReferenceError_: when the problem's own code fails.
        ValueError: ``ref_budget_bytes`` is None and ``KBENCH_REF_BUDGET_BYTES`` is not a
            non-negative integer.
    """

    REF_BUDGET_ENV = "KBENCH_REF_BUDGET_BYTES"
    REF_BUDGET_CUDA_FRACTION = 0.10  # of the device's total memory, when the variable is not set
    @classmethod
    def reference_budget_bytes(cls, device: torch.device) -> int | None:
        """The device memory stored references may take, in bytes: ``KBENCH_REF_BUDGET_BYTES`` when set,
        else 10% of a CUDA device's total memory; None (unlimited) on other devices.

        Raises:
            ValueError: the variable is set to something other than a non-negative integer.
        """
        raw = os.environ.get(cls.REF_BUDGET_ENV, "").strip()
        if raw:
            try:
                value = int(raw)
            except ValueError:
                value = -1
            if value < 0:
                raise ValueError(f"{cls.REF_BUDGET_ENV}={raw!r}: expected a non-negative integer number of bytes")
            return value
        if device.type == "cuda":
            return int(torch.cuda.get_device_properties(device).total_memory * cls.REF_BUDGET_CUDA_FRACTION)
        return None

    def __init__(self, problem: Problem, protocol: Protocol, run_seed: int, device: torch.device,
                 root: Path, ref_budget_bytes: int | None = None, redraw: bool | None = None,
                 memory_share: float = 1.0, shared_device: bool = False,
                 host_stretch: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
                 between: Callable[[], Any] | None = None) -> None:
        # the fraction of the device's memory the slot plans for (see DeviceEvaluator's ``memory_share``)
        self.memory_share = memory_share
        # host_stretch(): a context for the set-up's host work (the problem's module executed, its model
        # built and copied on the host), during which the slot's hold on the device is given up; between():
        # called between the set-up's device steps (the reference's evaluations), where a timing window
        # another slot queued may go first (DeviceEvaluator.context). Neither changes what is computed
        off_device = host_stretch or contextlib.nullcontext
        step = between or (lambda: None)
        # other slots' jobs run on this device: the float64 twin running out of memory at set-up raises
        # (the slot evaluates again with the device to itself) instead of judging with allclose
        if ref_budget_bytes is None:
            ref_budget_bytes = self.reference_budget_bytes(device)
        self.problem = problem
        self.protocol = protocol
        self.device = device
        self.dtype = _DTYPE[protocol.precision]
        self.cast_all = protocol.name == "kernelbench"
        self.dir = root / f"p_{problem.code_sha256[:16]}_{protocol.fingerprint()}_{run_seed}"
        self.inputs_dir = self.dir / "inputs"
        self.inputs_dir.mkdir(parents=True, exist_ok=True)
        self.problem_path = self.dir / "problem.py"
        self.problem_path.write_text(problem.code, encoding="utf-8")
        self.flags: list[str] = []
        t0 = time.perf_counter()
        apply_tf32(protocol.tf32)
        with off_device():
            mod = _exec_problem(problem)
        self.module = mod
        n_correct = protocol.correct_trials
        self.n_correct = n_correct
        self.recheck_set = n_correct  # a set the candidate has never seen before timing ends
        n_sets = n_correct + 1
        if protocol.seed_policy == "fixed":
            # KernelBench main: seed 42, then one trial seed per correctness trial drawn from it.
            torch.manual_seed(protocol.fixed_seed)
            seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(n_sets)]
            self.weights_seed = protocol.fixed_seed
        else:
            seeds = [_derive_seed(run_seed, problem.code_sha256, "inputs", i) for i in range(n_sets)]
            self.weights_seed = _derive_seed(run_seed, problem.code_sha256, "weights")
        #: the key of the timed rounds' refreshed values (timing.keyed_round): 63 random bits of this context's own
        #: (the trusted side and the job's worker use the same; nothing else needs it), so that a candidate cannot
        #: compute a round's values before its call receives them
        self.refresh_key = secrets.randbits(63) | 1
        self.seeds = seeds
        with off_device():
            try:
                init = list(mod.get_init_inputs())
            except Exception as e:
                raise ReferenceError_(f"Model(*get_init_inputs()) fails: {type(e).__name__}: {e}") from None
            self.init_inputs = init
        # protocol.weights_device: built inside torch.device(<GPU>), the weights are drawn by the GPU's generator
        # in milliseconds, as device work under the slot's hold; on the host (KernelBench's references are),
        # by the host's generator in one thread: seconds for large models (about 25 s for L3/2)
        model = self._model_on_device(mod, init, device) if weights_on_device(protocol, device) else None
        #: where the reference's weights were drawn ("device" or "cpu"); the candidate's ModelNew is built there too
        self.weights_drawn_on = "cpu" if model is None else "device"
        if model is None:
            with off_device():  # seconds for large models: host work
                try:
                    torch.manual_seed(self.weights_seed)
                    model = mod.Model(*copy.deepcopy(init))  # the candidate gets get_init_inputs() as it returned it
                except Exception as e:
                    raise ReferenceError_(f"Model(*get_init_inputs()) fails: {type(e).__name__}: {e}") from None
                self.model_cpu = copy.deepcopy(model)
        else:
            try:
                self.model_cpu = host_module_copy(model)  # copied from the device: under the hold
            except Exception:  # noqa: BLE001 - a tensor that cannot be copied alone (a lazy module's): copy it whole
                self.model_cpu = copy.deepcopy(model)
        # the weights as first initialised, for the candidate's files: the host copy's own tensors, which nothing
        # changes (a clone of them was a second host copy of every weight: 8.6 GB for L3/2)
        self.cpu_state = {k: v.detach() for k, v in self.model_cpu.state_dict().items()} \
            if isinstance(self.model_cpu, torch.nn.Module) else {}
        model = model.to(device)
        if self.dtype != torch.float32:
            model = model.to(self.dtype)
        self.model = model
        # the weights' device memory (bytes), for the memory ledger's claims (DeviceEvaluator._planner): the
        # reference's as constructed (the candidate's ModelNew is taken to be as large), on the device at the
        # run's precision, and its float64 twin's (set below; 0 without one)
        self.weight_init_bytes = module_nbytes(torch, self.model_cpu)
        self.weight_bytes = module_nbytes(torch, model, device_only=True)
        self.weight64_bytes = 0
        # input sets: drawn on the GPU when the protocol says so (protocol.input_device), on the CPU
        # otherwise or where that fails. Sets drawn on the GPU that draw again to the same values from their
        # seeds are not kept at all (``redraw``): each use draws them again, in milliseconds, where a host
        # copy of a multi-GB set took seconds to make and seconds to copy back for every reference
        # evaluation. Others are kept on the host. Files for the candidate's process are written when a
        # candidate first needs them (:meth:`ensure_files`): a device whose candidates map the sets
        # (:mod:`.devshare`) never writes them.
        self._sets_cpu: list[list[Any] | None] = []
        self._sets_enc: list[Any] | None = None
        self._gen_device = device if getattr(protocol, "input_device", "cpu") == "device" and device.type != "cpu" \
            else None
        drawn: set[str] = set()
        self.redraw = False
        want_redraw = (self._gen_device is not None) if redraw is None else redraw
        expect_where = "device" if self._gen_device is not None else "cpu"
        reproducible = want_redraw
        self._copy_redraws = False  # get_inputs hands out a tensor it keeps: each redraw copies
        # where each value of a set goes in a shared device buffer (see DeviceEvaluator._share_sets), from
        # set 0's first draw; None where a set holds nested values (those sets go through files)
        self.share_places: list[dict[str, Any] | None] | None = None
        self.share_set_nbytes = 0
        self.set_nbytes = 0  # set 0's tensors, nested ones included
        self.cast_copies = False
        # what the trusted side's judging makes of set 0 beyond the set itself (bytes, for the memory claims,
        # DeviceEvaluator.work_nbytes): its float64 upcast, and a refresh for a timed round (the cast to the
        # run's precision, and refresh_values' working buffers: one of the run's precision, or for half
        # precision a float32 copy, a float32 buffer and the result)
        self.set64_nbytes = 0
        self.refresh_nbytes = 0
        for i, s in enumerate(seeds):
            vals, where = draw_inputs(mod, s, self._gen_device)
            drawn.add(where)
            if i == 0 and all(isinstance(v, torch.Tensor) or v is None or isinstance(v, (bool, int, float, str))
                              for v in vals):
                self.share_places, self.share_set_nbytes = _devshare.layout(vals)
            if i == 0:
                self.set_nbytes = tensor_nbytes(torch, _tensors_in(vals))  # nested values' tensors included
                # the candidate's process casts tensors of other dtypes to the run's precision (copies of its
                # own even where the sets are mapped from shared buffers; counted in the memory claims)
                self.cast_copies = any(isinstance(v, torch.Tensor) and (v.is_floating_point() or self.cast_all)
                                       and v.dtype != self.dtype for v in vals)
                self.set64_nbytes, self.refresh_nbytes = _judging_copies(vals, self.dtype, self.cast_all)
            if reproducible:
                rng = _rng_state(device)
                again, where2 = draw_inputs(mod, s, self._gen_device)
                _set_rng_state(device, rng)
                # drawn where asked (a device draw that fell back to the CPU has other values), and again
                # to the same values
                reproducible = where == where2 == expect_where and _same_values(vals, again)
                self._copy_redraws = self._copy_redraws or _shares_tensor(vals, again)
                del again
            self._sets_cpu.append(vals if where == "cpu" else None if reproducible else _to_host(vals))
            del vals
        self.redraw = reproducible and want_redraw
        if not self.redraw:  # host copies of every set (drawn on a device: copied from a draw again)
            rng = _rng_state(device)  # the generators stay where the draws above left them
            for i, s in enumerate(seeds):
                if self._sets_cpu[i] is None:
                    vals, _w = draw_inputs(mod, s, self._gen_device)
                    self._sets_cpu[i] = _to_host(vals)
            _set_rng_state(device, rng)
        else:
            self._sets_cpu = [None] * len(seeds)
            self._redraw_where = expect_where
        self.inputs_drawn_on = "device" if drawn == {"device"} else "cpu" if drawn == {"cpu"} else "mixed"
        self.state_enc: dict[str, Any] | None = None
        with off_device():  # the candidate's files of the weights (host copies: seconds for several GiB) are host work
            self.init_enc = encode_value(init, self.inputs_dir, "init_", [0])
            if protocol.weights == "state_dict" and self.cpu_state:
                self.state_enc = {k: write_tensor(v, self.inputs_dir / f"w_{i}.bin")
                                  for i, (k, v) in enumerate(self.cpu_state.items())}
            for f in self.inputs_dir.iterdir():
                os.chmod(f, 0o444)
        # reference outputs at the run's precision (and float64 for the fp64-bound judge): set 0's first;
        # then, unless storing every set's would cost more device memory than the budget allows, the
        # other sets'; then set 0's again: a second evaluation that differs (a random reference, or one
        # that depends on the calls before it) flags a nondeterministic reference
        self.refs: list[list[Any]] = []
        self.refs64: list[list[Any]] | None = None
        self._m64: Any = None  # float64 model (fp64-bound judge), kept while the context lives
        grad = torch.no_grad if protocol.reference_no_grad else torch.enable_grad

        # the reference's forward temporaries beyond its outputs (bytes, measured on set 0 on a CUDA device; 0
        # elsewhere): a candidate's forward is taken to need as much, and a lazy reference needs them at each
        # comparison; the memory ledger's claims count them (DeviceEvaluator.work_nbytes)
        self.ref_temp_bytes = 0
        self.ref64_temp_bytes = 0

        def run_ref(vals: list[Any], measure: bool = False) -> list[Any]:
            try:
                with grad():
                    # a copy of the set even on the CPU: a reference that writes into its inputs must
                    # not change the stored set (the next evaluation, the float64 twin's inputs)
                    args = _cast_set(_fresh_on(vals, device), self.dtype, self.cast_all)
                    if not measure:
                        return _detach_outputs(self.model(*args))
                    raw, peak = _peak_during(device, lambda: self.model(*args))
                    out = _detach_outputs(raw)
                    del raw
                    self.ref_temp_bytes = max(0, peak - tensor_nbytes(torch, out))
                    return out
            except Exception as e:
                raise ReferenceError_(f"the reference fails on this device: {type(e).__name__}: {e}",
                                      oom=_device_oom(e)) from None

        self.refs.append(run_ref(self.set_values(0), measure=True))
        step()
        want64 = protocol.judge == "fp64-bound"
        set0_nbytes = tensor_nbytes(torch, self.refs[0])
        twin_nbytes = sum(o.numel() * self._twin_itemsize(o) for o in self.refs[0] if isinstance(o, torch.Tensor))
        self.out_nbytes = set0_nbytes
        self.ref_set_nbytes = set0_nbytes + (twin_nbytes if want64 else 0)
        self.ref_estimate_bytes = n_sets * self.ref_set_nbytes
        self.ref_budget_bytes = ref_budget_bytes
        self.lazy_refs = ref_budget_bytes is not None and self.ref_estimate_bytes > ref_budget_bytes

        def check_determinism() -> None:
            again = run_ref(self.set_values(0))
            if not all((_same_tensor(a, b) if isinstance(a, torch.Tensor) else a == b)
                       for a, b in zip(self.refs[0], again)):
                self.flags.append("nondeterministic-reference")

        checked = False
        if self.lazy_refs:
            rng = _rng_state(device)
            check_determinism()  # right away: the other sets are not evaluated here
            checked = True
            if "nondeterministic-reference" in self.flags:
                # another evaluation of a random reference draws differently: it keeps its stored outputs
                # whatever the budget, and is judged with allclose against them (no float64 twin). The
                # generators go back to where set 0 left them, so the stored sets draw as in stored mode
                self.lazy_refs = False
                self.flags.remove("nondeterministic-reference")
                checked = False
                _set_rng_state(device, rng)
            else:
                log.info("%s: references evaluated at each comparison (storing them would take %d bytes, "
                         "budget %d)", problem.key, self.ref_estimate_bytes, ref_budget_bytes)
                self.refs.clear()  # nothing of set 0's outputs stays allocated
        if not self.lazy_refs:
            for i in range(1, n_sets):
                self.refs.append(run_ref(self.set_values(i)))
                step()
            if not checked:
                check_determinism()  # after the other sets: a reference that depends on earlier calls differs
                step()
            self.out_nbytes = max(tensor_nbytes(torch, r) for r in self.refs)
        random_ref = "nondeterministic-reference" in self.flags
        # a random reference is judged with allclose against its stored draw: no float64 twin
        want64 = want64 and not random_ref
        if not want64:  # what storing costs: no twins for a random reference
            self.ref_set_nbytes = set0_nbytes
            self.ref_estimate_bytes = n_sets * self.ref_set_nbytes
        # the float64 twin's outputs (bytes, for the memory claims): set 0's, scaled to the largest set's outputs
        self.out64_nbytes = (-(-twin_nbytes * self.out_nbytes // set0_nbytes) if set0_nbytes else twin_nbytes) \
            if want64 else 0
        if want64:
            if device.type == "cuda" and self.large:
                # the set-sized blocks that the draws, the reference's evaluations and the determinism check
                # left in the allocator's cache cannot hold the upcast or the twin's outputs (twice a set's
                # size): handed back before them rather than kept beside them (H200 session 18: L1/19's
                # trusted side peaked at 52.5 GiB with its judging at 30)
                torch.cuda.empty_cache()
            def eval64(fresh: bool) -> None:
                self._m64 = self._model64(off_device, fresh=fresh)
                self.weight64_bytes = module_nbytes(torch, self._m64, device_only=True)
                with grad():
                    args64 = _upcast(self.set_values(0), device)
                    raw64, peak64 = _peak_during(device, lambda: self._m64(*args64))
                    out64 = _detach_outputs(raw64)
                    del raw64, args64
                    self.ref64_temp_bytes = max(0, peak64 - tensor_nbytes(torch, out64))
                    if fresh:
                        # built anew, only its weights and buffers are the reference's: whatever else its
                        # __init__ drew (numpy, random, an attribute) is drawn again. A twin that computes
                        # something else would widen the bound it sets, so it must agree with the reference
                        _check_fresh_twin(self.refs[0] if self.refs else run_ref(self.set_values(0)), out64,
                                          self.dtype)
                    if self.lazy_refs:
                        # evaluated once here all the same, so that a reference without a float64
                        # evaluation is flagged (and judged with allclose) from the first candidate on
                        del out64
                    else:
                        self.refs64 = [out64]
                        for i in range(1, n_sets):
                            step()
                            self.refs64.append(_detach_outputs(self._m64(*_upcast(self.set_values(i), device))))

            # a copy of the reference first; where that fails, a twin built anew (a copy keeps what the model's
            # functions closed over, the original's float32 modules: L3/44's ``self.mlpf`` lambda)
            for fresh in (False, True):
                if fresh and device.type == "cuda":
                    gc.collect()  # the failed copy's tensors, freed with the exception handled above
                    torch.cuda.empty_cache()  # and handed back to the driver (the other slots' memory)
                try:
                    eval64(fresh)
                    break
                except HostLockLost:  # the slot's hold, not the twin: never a reason to judge with allclose
                    raise
                except Exception as e:
                    self.refs64 = None
                    self._m64 = None
                    self.weight64_bytes = 0
                    if shared_device and _device_oom(e):  # others' memory perhaps: no verdict on a weaker judge
                        raise ReferenceError_(f"the float64 reference ran out of device memory: {type(e).__name__}: "
                                              f"{str(e)[:300]}", oom=True) from None
                    # a copy's failure that a model built anew would repeat (no memory, an operation without
                    # a float64 kernel) is not tried again: the rebuild costs seconds for a large model
                    if not fresh and isinstance(self.model_cpu, torch.nn.Module) and not _device_oom(e) \
                            and "not implemented for" not in str(e):
                        log.info("%s: the float64 copy of the reference failed (%s); building it anew",
                                 problem.key, e)
                        continue
                    log.warning("%s: no float64 reference (%s); judging with allclose", problem.key, e)
                    self.flags.append("no-fp64-reference")
        self.setup_s = time.perf_counter() - t0
        self.baselines: dict[str, TimingStats] = {}
        self.baseline_info: dict[str, Any] = {}

    def set_values(self, i: int) -> list[Any]:
        """Input set ``i`` as ``get_inputs`` returned it (its own dtypes), as fresh tensors on the device:
        drawn again from its seed (``redraw``; the generators are left as they were) or copied from the
        host copy. Nothing the caller does to them reaches the set as kept."""
        if self.redraw:
            rng = _rng_state(self.device)
            try:
                vals, where = draw_inputs(self.module, self.seeds[i], self._gen_device)
            finally:
                _set_rng_state(self.device, rng)
            if where != self._redraw_where:  # e.g. the device was out of memory: a CPU draw has other values
                raise ReferenceError_(f"input set {i} could not be drawn again on {self._redraw_where} (the "
                                      f"device is short of memory?)", oom=True)
            return [v.to(self.device, copy=self._copy_redraws) if isinstance(v, torch.Tensor) else v for v in vals]
        return _fresh_on(self._sets_cpu[i], self.device)

    @property
    def n_sets(self) -> int:
        """Input sets: the correctness sets and the re-check set."""
        return len(self.seeds)

    @property
    def sets_cpu(self) -> list[list[Any]]:
        """Every input set on the host (made from draws on first use where the sets are drawn again)."""
        for i, vals in enumerate(self._sets_cpu):
            if vals is None:
                self._sets_cpu[i] = _to_host(self.set_values(i))
        return self._sets_cpu  # type: ignore[return-value]

    @property
    def sets_enc(self) -> list[Any]:
        """The input sets as written for a candidate process's file exchange (written at first use)."""
        if self._sets_enc is None:
            enc = []
            for i in range(self.n_sets):
                vals = self._sets_cpu[i] if self._sets_cpu[i] is not None else self.set_values(i)
                enc.append(encode_value(vals, self.inputs_dir, f"set{i}_", [0]))
                del vals
            for f in self.inputs_dir.glob("set*"):
                os.chmod(f, 0o444)
            self._sets_enc = enc
        return self._sets_enc

    def _model_on_device(self, mod: types.ModuleType, init: list[Any], device: torch.device) -> Any:
        """``mod.Model(*init)`` built inside ``torch.device(device)`` under the weights' seed, or None where that
        raises (the caller builds it on the host then; the device's memory a failed build took is handed back).
        ``init`` is not touched: the build gets a deep copy.

        Raises:
            ReferenceError_: out of device memory (``oom``): a host build would meet it again when moved.
        """
        oom: str | None = None
        try:
            args = copy.deepcopy(init)
            torch.manual_seed(self.weights_seed)
            with torch.device(device):
                return mod.Model(*args)
        except Exception as e:  # noqa: BLE001 - any other failure: the host's build decides, with its own error
            if _device_oom(e):
                oom = str(e)[:200]
            else:
                log.info("%s: the reference cannot be built on %s (%s: %s); building it on the host",
                         self.problem.key, device, type(e).__name__, str(e)[:200])
        gc.collect()  # the failed build's tensors (its traceback is gone)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if oom is not None:  # the host's build would meet it again when moved; the slot may re-run it alone
            raise ReferenceError_(f"out of device memory building Model(*get_init_inputs()) on {device}: {oom}",
                                  oom=True)
        return None

    def _model64(self, off_device: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
                 fresh: bool = False) -> Any:
        """A float64 copy of the reference model on the device (weights as first initialised): each floating
        tensor moved, then cast on the device, one tensor at a time, its float32 copy freed as soon as it is cast
        (and the allocator's blocks handed back at the end). Moved whole, then cast (``.to(device).double()``),
        the float32 copy stayed in this process's allocator cache beside the twin; cast whole on the host first,
        the host held the float64 copy of every weight at once (16 GiB for L3/2); cast by the host tensor by
        tensor on the way, the host cast every weight in one thread and the bus carried twice its bytes. The
        values are the same every way; complex tensors keep their dtype, as with ``.double()``.

        ``fresh``: instead of a deep copy of the reference, a model built anew (``Model(*get_init_inputs())``,
        under the weights' seed; the host's and this device's generators left as they were) and given the
        reference's weights and buffers by name. Anything else its ``__init__`` draws is drawn again, so the
        caller checks its outputs against the reference's (:func:`_check_fresh_twin`). A deep copy keeps
        references to objects outside the copied modules' attributes as they were, so a function the model holds
        (a lambda closing over a submodule, as L3/44's ``mlpf``) still calls the reference's own float32 modules;
        built anew, it closes over the twin's.

        Raises:
            RuntimeError: ``fresh`` and the new model's parameters or buffers do not match the reference's
                (names or shapes).
        """
        device = self.device

        def move(t: torch.Tensor, copy: bool = False) -> torch.Tensor:
            # cast on the device: a host tensor cast on its way (``.to(device, torch.float64)``) is cast by the
            # host, in one thread, and crosses the bus at twice its size (17 GB for L3/2's weights). Each float32
            # copy is freed as soon as it is cast; the same values either way. ``copy``: a tensor that needs no
            # cast and is on the device already is copied all the same (never the host copy's own)
            if t.is_floating_point() and t.dtype != torch.float64:
                return t.to(device).to(torch.float64)
            return t.to(device, copy=copy)
        if not fresh:
            # the host copy's parameters and buffers moved and cast one at a time, straight into a copy of its
            # structure: device work, under the hold (a deep copy of the host copy first, then moved, copied every
            # weight on the host once more: seconds for a model of several GiB)
            twin = module_copy(self.model_cpu, lambda t: move(t, copy=True))
            if device.type == "cuda":
                torch.cuda.empty_cache()  # the float32 copies' blocks
            return twin
        # a twin built anew where the reference was (protocol.weights_device) draws what its __init__ draws beyond
        # the weights from the same generator: built on the device, that is device work, under the hold; on the
        # host, host work
        on_device = self.weights_drawn_on == "device"
        with contextlib.nullcontext() if on_device else off_device():
            # manual_seed reseeds every device's generator too: this device's is put back with the host's
            with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
                torch.manual_seed(self.weights_seed)
                with torch.device(device) if on_device else contextlib.nullcontext():
                    twin = self.module.Model(*copy.deepcopy(self.init_inputs))
            have = dict(self.model_cpu.named_parameters())
            have.update(self.model_cpu.named_buffers())
            want = dict(twin.named_parameters())
            want.update(twin.named_buffers())
            if set(have) != set(want):
                raise RuntimeError("the model built anew has other parameters or buffers than the reference: "
                                   f"{sorted(set(have) ^ set(want))[:5]}")
            with torch.no_grad():
                for name, t in want.items():
                    t.copy_(have[name])  # raises on a shape that differs
        return twin._apply(move)

    @staticmethod
    def _twin_itemsize(o: torch.Tensor) -> int:
        """Bytes per element of ``o``'s float64 twin (complex128 for complex, the own dtype otherwise)."""
        if o.is_floating_point():
            return torch.float64.itemsize
        if o.is_complex():
            return torch.complex128.itemsize
        return o.element_size()

    @property
    def fp64_judge(self) -> bool:
        """Outputs are judged against a float64 evaluation (``fp64-bound``, which works for this problem)."""
        return self._m64 is not None

    def reference_info(self) -> dict[str, Any]:
        """How the references are kept, for a result's ``extra``: ``reference_mode`` (``"lazy"`` or
        ``"stored"``), ``reference_estimate_bytes`` (storing every set's), ``reference_budget_bytes``
        (None: unlimited), and the forward's measured temporaries beyond its outputs (``reference_temp_bytes``,
        ``reference64_temp_bytes`` for the float64 twin; 0 where not measured), and the device bytes of the
        reference's weights (``reference_weight_bytes``) and of its float64 twin's (``reference64_weight_bytes``)."""
        return {"inputs_drawn_on": self.inputs_drawn_on, "weights_drawn_on": self.weights_drawn_on,
                "reference_mode": "lazy" if self.lazy_refs else "stored",
                "reference_estimate_bytes": self.ref_estimate_bytes,
                "reference_budget_bytes": self.ref_budget_bytes,
                "reference_temp_bytes": self.ref_temp_bytes, "reference64_temp_bytes": self.ref64_temp_bytes,
                "reference_weight_bytes": self.weight_bytes, "reference64_weight_bytes": self.weight64_bytes}

    @property
    def timing_sets(self) -> list[int]:
        """The input sets the candidate's timing cycles through (``protocol.rotate_inputs``), fewer where
        the candidate's process could not hold them (:func:`timing_set_count`)."""
        total = planned_memory(self.device, self.memory_share) if self.device.type == "cuda" else None
        return list(range(timing_set_count(self.protocol.rotate_inputs, self.n_correct, self.share_set_nbytes, total)))

    def job_fields(self, shared_sets: list[Any] | None = None) -> dict[str, Any]:
        """What a candidate job needs of this problem; ``shared_sets``: the sets as mapped from shared
        device buffers (:meth:`DeviceEvaluator._share_sets`), else the files are used."""
        return {
            "inputs_dir": str(self.inputs_dir),
            "problem_path": str(self.problem_path),
            "sets": shared_sets if shared_sets is not None else self.sets_enc,
            "init_inputs": self.init_enc,
            "state_dict": self.state_enc,
            "weights_seed": self.weights_seed,
            "weights_device": self.weights_drawn_on,
            "refresh_key": self.refresh_key,
            "n_correct": self.n_correct,
            "timing_sets": self.timing_sets,
            "out_nbytes": self.out_nbytes,
            "cast_int_inputs": self.cast_all,
            "large": self.large,
        }

    @property
    def large(self) -> bool:
        """A large job (an input set and its outputs of :data:`.tensorio.LARGE_SET_BYTES` or more, sizes as
        ``get_inputs`` returns them): the candidate's process keeps one set of its own and it and the trusted
        side take turns with the device's memory (each hands its copies back before the other computes;
        :meth:`DeviceEvaluator.work_nbytes` counts it so)."""
        return max(self.share_set_nbytes, self.set_nbytes) + self.out_nbytes >= LARGE_SET_BYTES

    def compare(self, outs: list[Any], set_idx: int) -> Comparison:
        """Judge ``outs`` (the candidate's flattened outputs, on the device) against input set ``set_idx``'s
        reference: the stored one, or in lazy mode one evaluated now (:meth:`compare_on`).

        Raises:
            ReferenceError_: the trusted side ran out of device memory judging, twice (``oom``): the
                harness's failure, not the candidate's.
        """
        if self.lazy_refs:
            return self.compare_on(set_idx, None, outs)
        ref64 = self.refs64[set_idx] if self.refs64 is not None else None

        def judge() -> Comparison:
            return self._judge(outs, self.refs[set_idx], ref64)
        return self._retry_on_oom(judge, judge, f"judging input set {set_idx} ran out of memory")

    def _retry_on_oom(self, first: Callable[[], Comparison], second: Callable[[], Comparison],
                      what: str) -> Comparison:
        """``first()``; where it runs out of device memory (beside the candidate's process, or another
        slot's job) on a CUDA device, ``second()`` once more with the allocator's cache handed back.

        Raises:
            ReferenceError_: out of memory still (``oom``, the message starting with ``what``): the
                harness's failure, not the candidate's.
        """
        try:
            return first()
        except torch.OutOfMemoryError:
            if self.device.type != "cuda":
                raise ReferenceError_(f"{what}: out of memory", oom=True) from None
        torch.cuda.empty_cache()
        try:
            return second()
        except torch.OutOfMemoryError as e:
            raise ReferenceError_(f"{what}: {type(e).__name__}: {e}", oom=True) from None

    def _judge(self, outs: list[Any], ref: list[Any], ref64: list[Any] | None) -> Comparison:
        """``outs`` against reference outputs ``ref`` (and their float64 twin) under the protocol."""
        p = self.protocol
        tol = p.tolerance
        judge = p.judge
        if "nondeterministic-reference" in self.flags:
            # a random reference (dropout in training mode, say) has no float64 twin with the same draws:
            # judge against the run-precision reference itself (the problem is flagged for the audit)
            judge = "allclose"
        return compare_outputs(outs, ref, judge=judge, atol=tol.atol, rtol=tol.rtol, nan_policy=p.nan_policy,
                               check_dtype=p.check_dtype, refs64=ref64, fp64_multiple=p.fp64_multiple,
                               fp64_floor_rel=p.fp64_floor_rel)

    def compare_on(self, set_idx: int, round_: int | None, outs: list[Any]) -> Comparison:
        """Judge ``outs`` against the reference on input set ``set_idx`` with its floating tensors
        refreshed for timed round ``round_`` on the device (:func:`.timing.refresh_values`), as the
        candidate process refreshes them between timed trials (None: the set as stored).

        Raises:
            ReferenceError_: evaluating the reference failed (out of device memory on the trusted side,
                say): not the candidate's doing.
        """
        def inputs() -> tuple[list[Any], list[Any]]:
            """(the set on the device at get_inputs' dtypes, the run-precision inputs as refreshed)."""
            raw = self.set_values(set_idx)
            vals = _cast_set(raw, self.dtype, self.cast_all)
            if round_ is not None:
                vals = [_timing.refresh_values(v, round_, key=self.refresh_key)
                        if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in vals]
            return raw, vals

        # out of device memory: once more on the path that needs less
        return self._retry_on_oom(lambda: self._compare_once(outs, set_idx, round_, inputs, tight=False),
                                  lambda: self._compare_once(outs, set_idx, round_, inputs, tight=True),
                                  f"the reference fails on input set {set_idx} at comparison")

    def _compare_once(self, outs: list[Any], set_idx: int, round_: int | None,
                      inputs: Callable[[], tuple[list[Any], list[Any]]], tight: bool) -> Comparison:
        """One attempt of :meth:`compare_on`; ``tight`` takes the path that needs less device memory.

        Raises:
            torch.OutOfMemoryError: the device ran out of memory (the caller may try again).
            ReferenceError_: the reference failed otherwise.
        """
        p = self.protocol
        grad = torch.no_grad if p.reference_no_grad else torch.enable_grad
        try:
            with grad():
                if self.fp64_judge and (tight or self.large or self._memory_tight()):
                    # two copies of the set, one after the other: the float64 twin first, from its own copy
                    # of the set (freed before the upcast's forward), then the reference from a second copy.
                    # At most the set's float64 upcast and the twin's outputs (or the twin's outputs, a
                    # copy of the set and the reference's outputs) live at once beside the candidate's
                    # output: five times a 6 GiB set's bytes where one copy of the set, its upcast and both
                    # outputs took six (H200 session 18, scripts/gpu/judge_peak.py: 24 GiB allocated beyond the
                    # candidate's output against 30, and 24 reserved against 36). Taken by every large job and
                    # by a smaller one where the device is short of memory. A set drawn again on the device
                    # costs milliseconds; a set kept on the host is copied to the device twice
                    raw, vals = inputs()
                    src = raw if round_ is None else vals
                    del raw, vals
                    up = _upcast(src, self.device)
                    del src
                    if self.large and self.device.type == "cuda":
                        # the set's freed block cannot hold the twin's outputs (twice its size): handed back
                        # rather than kept beside them in the allocator's cache (a block each of the set's
                        # size, the twin's outputs' and the upcast's: 6 sets held for 5 in use)
                        torch.cuda.empty_cache()
                    ref64 = _detach_outputs(self._m64(*up))
                    del up
                    raw, vals = inputs()  # as before the float64 twin ran (it may write into its inputs)
                    del raw  # the run-precision inputs keep what they share of it
                    ref = _detach_outputs(self.model(*vals))
                    del vals
                else:
                    # the set goes to the device once, at the dtypes get_inputs returned (one host-to-device
                    # copy per tensor); the run-precision inputs are cast from that copy and the float64
                    # twin's upcast from it on the device, where each used to copy the set from the host
                    raw, vals = inputs()
                    up = None
                    if self.fp64_judge:
                        # the set as stored is upcast from the values get_inputs returned, as the stored refs64
                        # are (not from their run-precision copies): lazy and stored mode judge alike. Refreshed
                        # values are upcast as refreshed. Made before the reference runs, and sharing no tensor
                        # with its inputs (_upcast clones what it would share): a reference that writes into
                        # its inputs changes none of these
                        up = _upcast(raw if round_ is None else vals, self.device)
                    del raw  # the run-precision inputs keep what they share of it
                    ref = _detach_outputs(self.model(*vals))
                    del vals
                    ref64 = None
                    if up is not None:
                        ref64 = _detach_outputs(self._m64(*up))
                        del up
        except torch.OutOfMemoryError:
            raise
        except Exception as e:  # the reference (or the trusted side's memory) failed, not the candidate
            if _device_oom(e) or (isinstance(e, ReferenceError_) and e.oom):
                raise torch.OutOfMemoryError(f"{type(e).__name__}: {e}") from None
            raise ReferenceError_(f"the reference fails on input set {set_idx} at comparison: "
                                  f"{type(e).__name__}: {e}") from None
        return self._judged(outs, ref, ref64)

    def _memory_tight(self) -> bool:
        """Whether the device lacks free memory for a lazy comparison's one-copy path (the set, its float64
        upcast and the outputs at once: about four times a set's reference bytes)."""
        if self.device.type != "cuda":
            return False
        try:
            free, _total = torch.cuda.mem_get_info(self.device)
        except Exception:  # noqa: BLE001 - unknown: take the path that needs less
            return True
        return free < 4 * self.ref_set_nbytes

    def _judged(self, outs: list[Any], ref: Any, ref64: Any) -> Comparison:
        """The comparison of ``outs`` with a lazily evaluated reference; hands big temporaries back."""
        cmp = self._judge(outs, ref, ref64)
        del ref, ref64
        if self.device.type == "cuda" and (self.large or self.ref_set_nbytes >= LARGE_SET_BYTES):
            # the candidate's process, alive meanwhile, needs the device memory these temporaries (inputs,
            # their float64 upcasts, reference outputs and their twins: several times the outputs) leave
            # in this process's allocator cache; for small sets handing it back only costs allocations
            torch.cuda.empty_cache()
        return cmp

    def free(self) -> None:
        """Release the references, the float64 model, the reference model and the inputs' files."""
        self._m64 = None
        self.refs.clear()
        if self.refs64:
            self.refs64.clear()
        self.model = None
        shutil.rmtree(self.dir, ignore_errors=True)


class DeviceEvaluator:
    """Evaluates candidates on one device. Not thread-safe: one candidate at a time per device.

    Args:
        device: ``"cpu"`` or ``"cuda"`` (the process should see exactly one GPU; set
            ``CUDA_VISIBLE_DEVICES`` before creating it).
        scratch_dir: where per-problem inputs and per-candidate folders go (tmpfs when possible).
        build_cache: read-only folder of prebuilt extensions (``kb_<hash>.so``), shared with builders.
        start_method: ``zygote`` or ``spawn`` (see :mod:`.process`).
        memory_limit_bytes: resident-memory limit of a candidate process (host memory).
        sandbox: apply the sandbox (network, Landlock, limits) to candidate processes.
        memory_share: the fraction of the device's memory this slot plans for (its shared input sets,
            timing copies and stored references): 1/N with N slots on one GPU (``--gpus 0,0``). An
            explicit ``KBENCH_REF_BUDGET_BYTES`` is taken as each slot's own.
        window_queue: ``(flags, index)``: a shared byte array with one flag per slot of the run on this
            physical device (``multiprocessing.Array``) and this slot's index in it. A slot sets its flag
            while it waits for or holds a timing window; the others give way at their next step and stay
            paused until no flag is set (:meth:`_gpu_yield`). None: only other processes' windows queued
            at the host lock's turnstile are seen.
        quieter: a :class:`.quiet.HostQuieter` that pauses the run's builds and warm-ups while a timing
            window is open (None: nothing is paused).
        memory_ledger: this slot's :class:`.memledger.MemoryLedger` on a device shared with other slots
            of the run: each job then plans for the share it needs while the others need little, instead
            of the fixed ``memory_share`` (see :mod:`.memledger`). None: the fixed share.

    Raises:
        ValueError: ``memory_share`` is not in (0, 1].
    """

    def __init__(self, device: str = "cpu", *, scratch_dir: str | os.PathLike[str] | None = None,
                 build_cache: str | os.PathLike[str] | None = None, start_method: str = "zygote",
                 memory_limit_bytes: int | None = None, sandbox: bool = True,
                 extra_env: dict[str, str] | None = None, timing_lock: Any = None,
                 physical_device: str | None = None, memory_share: float = 1.0,
                 window_queue: tuple[Any, int] | None = None, quieter: Any = None,
                 memory_ledger: Any = None) -> None:
        self.window_queue = window_queue
        self.memory_ledger = memory_ledger
        self.quieter = quieter
        if not 0.0 < memory_share <= 1.0:
            raise ValueError(f"memory_share={memory_share!r}: expected a fraction in (0, 1]")
        self.memory_share = float(memory_share)
        self._job_share = self.memory_share  # the share the current job plans for (_plan_memory)
        self._job_claim = 0.0  # and its claim in the memory ledger (0.0 without one)
        self._alone = False  # the current job claims the whole device (a re-run after an oom beside others)
        self._alone_fell = False  # ... but took it after its wait ran out, whatever the others held
        self._out_limit_bytes: int | None = None  # the most bytes the current job's outputs may describe
        self._in_job = False  # inside evaluate(): measure_baselines uses the job's claim
        self.device = torch.device(device if device != "cuda" else "cuda:0")
        self.timing_lock = timing_lock
        self.physical_device = physical_device or str(self.device)
        # the device's identity on this host, for the host-wide timing lock (CUDA devices only)
        self.host_lock_key: str | None = device_lock_key(self.device)
        self._gpu_share: HostDeviceLock | None = None  # held shared while evaluate() computes untimed (_gpu_work)
        self._host_off = False  # that hold is given up for a stretch of host work (_host_stretch)
        base = Path(scratch_dir) if scratch_dir else _default_scratch()
        self.scratch, self._scratch_fd = claim_scratch(base, "kbdev_")  # a killed run's folder is swept later
        self.build_cache = Path(build_cache) if build_cache else None
        self.sandbox_on = sandbox
        self.memory_limit = memory_limit_bytes or _default_memory_limit()
        env_extra = {"TRITON_INTERPRET": "1"} if self.device.type == "cpu" else {}
        env_extra.update(extra_env or {})
        if self.device.type == "cuda":
            # the same value the build pool uses (see target_arch_list), or no cache entry matches
            env_extra["TORCH_CUDA_ARCH_LIST"] = target_arch_list(torch.cuda.get_device_capability(self.device)) or ""
        self.child_env = clean_environment(os.environ, env_extra)
        self.launcher = Launcher(self.child_env, start_method)
        # Triton's host module, built once and planted in each candidate's fresh Triton cache (.tritonseed);
        # made at the first candidate on a CUDA device
        self._triton_seed: TritonSeed | None = None
        self._triton_seed_tried = self.device.type != "cuda"
        self._job_triton_seeded = False
        self._contexts: dict[tuple[str, str, int], ProblemContext] = {}
        # (problem hash, protocol fingerprint) -> device bytes its reference's set-up took (_peak_during)
        self._setup_peaks: dict[tuple[str, str], int] = {}
        #: each mode's baseline_info from the last measure_baselines (read after its context may be freed)
        self.last_baseline_info: dict[str, Any] = {}
        self._fingerprint: dict[str, Any] | None = None
        self._gpu_node: Any = _UNSET  # the device's NUMA node, read at the first window (_record_place)
        # device memory shared with candidate processes (CUDA IPC, see .devshare): tried at the first
        # candidate; KBENCH_DEVSHARE=0 keeps the file exchange
        self._share_ok: bool | None = None if _devshare.enabled() else False
        # the current candidate's steps and when the last one ended (_run_candidate, closed by _finish)
        self._timeline: tuple[list[list[Any]], list[float]] | None = None
        #: a candidate's process start (its CUDA context made, the shared buffers mapped) runs with this
        #: slot's shared hold given up, so a timing window queued meanwhile need not wait for it
        #: (``KBENCH_START_OFF_HOLD``, off by default until measured on a GPU; see :func:`start_off_hold_enabled`)
        self.start_off_hold = start_off_hold_enabled()
        #: a window queued while the candidate compiles a Triton kernel in a correctness call goes on beside
        #: the compile (``KBENCH_COMPILE_OFF_HOLD``, on by default; see :func:`compile_off_hold_enabled`)
        self.compile_off_hold = compile_off_hold_enabled()
        #: the lane's job has the device while it computes (``KBENCH_LANE_PRIORITY``, on by default since two
        #: pairs of sweeps on an H200; see :func:`lane_priority_enabled`)
        self.lane_priority = lane_priority_enabled()
        #: (with lane_priority) other slots' untimed device work waits while the lane's job computes too
        #: (``KBENCH_LANE_EXCLUSIVE``, off by default until measured; see :func:`lane_exclusive_enabled`)
        self.lane_exclusive = lane_exclusive_enabled()
        self._lane_job = False  # the current job is the lane's (a large problem) and lane_priority is on
        self._share_bufs: list[_devshare.SharedBuffer] = []
        self._share_out: _devshare.SharedBuffer | None = None
        self._share_failures = 0
        self._share_quarantine: list[_devshare.SharedBuffer] = []
        self._share_staged = False  # one staging buffer, filled on request (_stage_set)
        self._stage_requests = 0  # need_set requests served for the current candidate
        self.layers: dict[str, bool] = {}
        self.probe_log: list[str] = []
        if sandbox:
            self._choose_layers()

    def _choose_layers(self) -> None:
        """Keep the strongest sandbox layer set under which a candidate process can still use the device."""
        from .sandbox import LAYER_SETS, pinned_layers

        sets = list(LAYER_SETS)
        pick = pinned_layers()  # KBENCH_SANDBOX_LAYERS, e.g. "netns" or "netns,landlock": try that set first
        if pick is not None:
            sets = [pick] + [x for x in sets if x != pick]
        for layers in sets:
            jobdir = Path(tempfile.mkdtemp(prefix="probe_", dir=self.scratch))
            job = {"mode": "probe", "job_dir": str(jobdir), "inputs_dir": str(jobdir), "device": str(self.device),
                   "protocol": {}}
            cfg = {"private_dir": str(jobdir), "cpu_time_s": 600, "file_size_bytes": 1 << 30,
                   "extra_write_dirs": site_write_dirs(self.device.type), **layers}
            try:
                h = self.launcher.start(job, cfg)
                try:
                    deadline = time.monotonic() + 120
                    msg: dict[str, Any] = {}
                    while msg.get("event") != "probe":
                        msg = h.chan.recv(timeout_s=max(0.0, deadline - time.monotonic()))
                finally:
                    h.close()
            except (ChannelError, OSError) as e:
                msg = {"ok": False, "error": f"probe process failed: {e}"}
            finally:
                shutil.rmtree(jobdir, ignore_errors=True)
            if msg.get("ok"):
                self.layers = dict(layers)
                return
            self.probe_log.append(f"{layers}: {msg.get('error', '')}"[:500])
            log.warning("sandbox layers %s stop the device from working in candidate processes: %s",
                        layers, msg.get("error"))
        self.layers = dict(LAYER_SETS[-1])

    # -- public ---------------------------------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        """Hardware/software fingerprint of this device (see :mod:`kernelbench_harness.hardware`)."""
        if self._fingerprint is None:
            from ..hardware import collect_fingerprint

            self._fingerprint = collect_fingerprint(str(self.device))
            self._fingerprint["sandbox_layers"] = dict(self.layers)
            if self.probe_log:
                self._fingerprint["sandbox_probe_failures"] = list(self.probe_log)
        return self._fingerprint

    @contextlib.contextmanager
    def timing_window(self, what: str, timer_pid: int | None = None) -> Iterator[dict[str, Any]]:
        """Hold the device's timing lock (shared by every slot on the same physical device) while
        timing, and record the wall-clock window: evidence that no two timings shared a device.
        ``timer_pid``: the process that times in it (the candidate's; None: this one), whose CPU the
        window records (:meth:`_timing_window`)."""
        resume = self._gpu_share
        lane_wait = self._wait_lane()  # (lane_priority) another slot's large job computing goes on first
        self._mark_queued(True)  # the run's other slots on this device give way from their next step
        try:
            if resume is not None:
                # this slot's untimed GPU work holds the host lock shared: finish it and give the lock up
                # before queueing for the window (holding it while waiting for the run's timing lock would
                # deadlock with a slot that holds that and waits for this one's shared hold to end)
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                self._set_lane(False)
                resume.release()
            with self._timing_window(what, timer_pid) as window:
                if lane_wait > 0:
                    window["lane_wait_s"] = round(lane_wait, 3)
                yield window
        finally:
            self._mark_queued(False)
            if resume is not None:
                self._take_shared(resume)

    #: this slot's flag in ``window_queue``: it waits for or holds a timing window (bit 0), and its lane job
    #: computes on the device holding the shared hold (bit 1, with ``lane_priority`` only: _set_lane)
    QUEUED_BIT, LANE_BIT = 1, 2
    #: the longest a slot's window waits, unqueued, for another slot's lane job to give the device up
    #: (``lane_priority``): a large job computes for seconds between its stretches of host work
    LANE_WAIT_MAX_S = 30.0

    def _mark_queued(self, on: bool) -> None:
        """Set this slot's flag in the run's per-device window queue (``window_queue``): it waits for or
        holds a timing window."""
        if self.window_queue is not None:
            flags, i = self.window_queue
            flags[i] = (flags[i] & self.LANE_BIT) | (self.QUEUED_BIT if on else 0)

    def _others_flagged(self, bit: int) -> bool:
        """Whether another of the run's slots on this device has ``bit`` set in its ``window_queue`` flag."""
        if self.window_queue is None:
            return False
        flags, i = self.window_queue
        return any(f & bit for j, f in enumerate(flags[:]) if j != i)

    def _windows_queued(self) -> bool:
        """Whether another of the run's slots on this device waits for or holds a timing window."""
        return self._others_flagged(self.QUEUED_BIT)

    def _set_lane(self, on: bool) -> None:
        """Set or clear this slot's lane bit in ``window_queue``: on while its lane job (``_lane_job``) holds
        the device's shared hold and computes, off whenever it gives the hold up (see
        :func:`lane_priority_enabled`). Does nothing for other jobs, or without a queue."""
        if self.window_queue is None or (on and not self._lane_job):
            return
        flags, i = self.window_queue
        on = on and self._gpu_share is not None and not self._host_off
        flags[i] = (flags[i] & self.QUEUED_BIT) | (self.LANE_BIT if on else 0)

    def _lane_busy(self) -> bool:
        """Whether another of the run's slots on this device has its lane job computing (its lane bit)."""
        return self._others_flagged(self.LANE_BIT)

    def _lane_holds_device(self) -> bool:
        """With ``lane_exclusive`` (and ``lane_priority``): whether another slot's lane job computes, so that this
        slot's untimed device work waits (:func:`lane_exclusive_enabled`). Never for the lane's own job."""
        return self.lane_exclusive and self.lane_priority and not self._lane_job and self._lane_busy()

    def _wait_lane(self) -> float:
        """With ``lane_priority``, before this slot's window is queued: wait while another slot's lane job
        computes (:meth:`_lane_busy`), at most :attr:`LANE_WAIT_MAX_S`. Returns the seconds waited (0.0 when
        nothing was waited for, for the lane's own job, or with the switch off)."""
        if not self.lane_priority or self._lane_job or not self._lane_busy():
            return 0.0
        t0, end = time.perf_counter(), time.monotonic() + self.LANE_WAIT_MAX_S
        while self._lane_busy() and time.monotonic() < end:
            time.sleep(0.002)
        return time.perf_counter() - t0

    #: the longest a slot waits for the run's other slots' queued windows before it takes the lock back
    #: anyway (a slot that died with its flag set must not stall the others), and for the lock itself
    #: after its candidate was ended for running out of time while giving way
    QUEUE_WAIT_MAX_S = 600.0

    def _take_shared(self, lk: HostDeviceLock, deadline: float | None = None) -> None:
        """Take the host lock shared again after a window or a yield, once none of the run's slots on this
        device waits for a window any more: the run's queued windows then follow each other while every
        slot is paused, instead of each waiting for the others to reach their next step again.

        The wait for another slot's lane job (``lane_exclusive``, at most :attr:`LANE_WAIT_MAX_S`) is the
        harness's, not the candidate's: it moves ``deadline`` by its length instead of running it out (the
        caller moves the candidate's deadline by the whole wait afterwards).

        Raises:
            TimeoutError: not taken by ``deadline`` (``time.monotonic()``, moved by the lane wait); nothing is
                held then.
        """
        cap = time.monotonic() + self.QUEUE_WAIT_MAX_S
        # one loop for both: the lane's job going to its own window queues it before its lane bit drops, so a
        # wait for the lane that ended there must not take the hold back ahead of that window
        lane_end: float | None = None
        lane_s = 0.0  # seconds waited for the lane so far
        while (now := time.monotonic()) < (cap if deadline is None else min(cap, deadline + lane_s)):
            if self._windows_queued():
                time.sleep(0.002)
                continue
            if self._lane_holds_device():  # (lane_exclusive) another slot's large job computes: it goes on first
                if lane_end is None:
                    lane_end = now + self.LANE_WAIT_MAX_S
                if now < lane_end:
                    time.sleep(0.002)
                    lane_s += time.monotonic() - now
                    continue
            break
        if self._windows_queued():
            log.warning("a timing window of this run stayed queued for %.0f s; taking the device lock back",
                        self.QUEUE_WAIT_MAX_S)
        lk.acquire(shared=True,
                   timeout_s=None if deadline is None else max(0.0, deadline + lane_s - time.monotonic()))
        self._set_lane(True)

    @contextlib.contextmanager
    def _timing_window(self, what: str, timer_pid: int | None = None) -> Iterator[dict[str, Any]]:
        """The window itself (see :meth:`timing_window`). Besides the locks it records the window's
        evidence: its wall-clock span, the processes it paused (``quiet_pids``, ``quiet_s``), the GPU's
        clocks (``gpu_start``, ``gpu_end``), how busy the host was (``host_cpu_busy``) and where the timing
        process ran (:meth:`_timer_place`)."""
        # On a CUDA device the host-wide lock below serialises every window on it, the run's slots' among
        # them, and an flock goes with a holder that dies. The run's multiprocessing lock is taken only
        # where there is no host lock (CPU slots): a slot worker killed inside a window would keep it held
        # and stall every other slot on the device at its next window.
        lock = self.timing_lock if not self.host_lock_key else None
        if lock is not None:
            lock.acquire()
        # and the host-wide lock of the physical device: another kbench run on this host times there too
        host_lock = HostDeviceLock(self.host_lock_key) if self.host_lock_key else None
        try:
            waited = host_lock.acquire() if host_lock is not None else None
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        window: dict[str, Any] = {"what": what, "device": self.physical_device, "pid": os.getpid(),
                                  "start": time.time()}
        if timer_pid is not None:  # another process times in it (the candidate's)
            window["timer_pid"] = int(timer_pid)
        if waited is not None:
            window["host_lock_wait_s"] = round(waited, 3)
        quieter = self.quieter
        gpu0 = probe = cpu0 = place0 = None
        try:
            if quieter is not None:
                # the run's builds and warm-ups pause (--quiet-host): a timing the host paces follows the
                # host's load. Inside the try: whatever happens, they are continued below
                try:
                    window["quiet_pids"] = quieter.pause()
                except Exception:  # noqa: BLE001 - comfort only: never a reason to keep the locks
                    log.warning("could not pause the run's processes for a timing window", exc_info=True)
            try:
                probe = self._nvml_probe()
                gpu0 = probe.sample() if probe is not None else None
            except Exception:  # noqa: BLE001 - evidence only: never a reason to keep the locks
                probe, gpu0 = None, None
            cpu0 = _host_cpu_times()
            place0 = self._timer_place(timer_pid)
            yield window
        finally:
            try:
                window["end"] = time.time()
                if place0 is not None:
                    self._record_place(window, place0, self._timer_place(timer_pid))
                if gpu0 is not None:
                    # the device's clocks, temperature, power and clock-event reasons as the window began and
                    # ended: a window that started at idle clocks or hit a power or thermal cap shows here
                    try:
                        window["gpu_start"], window["gpu_end"] = gpu0, probe.sample()  # type: ignore[union-attr]
                    except Exception:  # noqa: BLE001
                        window["gpu_start"] = gpu0
                    # and which processes NVML saw on the SMs meanwhile: more than one is another's work inside
                    # the window (evidence only; hardware.NvmlProbe.active_pids)
                    try:
                        pids = probe.active_pids(window["start"])  # type: ignore[union-attr]
                    except Exception:  # noqa: BLE001
                        pids = None
                    if pids is not None:
                        window["gpu_pids"] = {str(k): v for k, v in sorted(pids.items())}
                    # and the SM clock and power NVML sampled in between (a dip the two ends miss)
                    try:
                        between = probe.window_samples(window["start"])  # type: ignore[union-attr]
                    except Exception:  # noqa: BLE001
                        between = None
                    if between is not None:
                        window["gpu_between"] = between
            finally:
                try:
                    if quieter is not None:
                        quieter.resume()
                        if window.get("quiet_pids"):
                            window["quiet_s"] = round(quieter.last_s, 3)
                finally:
                    try:
                        cpu1 = _host_cpu_times()
                        if cpu0 and cpu1 and cpu1[1] > cpu0[1]:
                            # how busy the host's CPUs were meanwhile (builds, warm-ups, other slots): a busy
                            # host delays kernel launches, which CUDA events then count as device time
                            window["host_cpu_busy"] = round(1.0 - (cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1]), 3)
                    finally:
                        try:
                            if host_lock is not None:
                                host_lock.release()
                        finally:
                            if lock is not None:
                                lock.release()

    def _timer_place(self, pid: int | None) -> tuple[int, int | None, float | None] | None:
        """(CPU, its NUMA node, its MHz) where the timing process's main thread last ran, or None where
        ``/proc`` does not say (:func:`..hardware.last_cpu`). Evidence only: never raises."""
        from ..hardware import cpu_mhz, cpu_numa_node, last_cpu

        try:
            cpu = last_cpu(pid)
            return None if cpu is None else (cpu, cpu_numa_node(cpu), cpu_mhz(cpu))
        except Exception:  # noqa: BLE001
            return None

    def _record_place(self, window: dict[str, Any], start: tuple[int, int | None, float | None],
                      end: tuple[int, int | None, float | None] | None) -> None:
        """Put where the timing process ran into ``window``: ``timer_cpu`` [start, end] (the CPU its main
        thread last ran on as the window began and as it ended), ``timer_node`` [start, end] (their NUMA
        nodes) and ``timer_mhz`` [start, end] (their frequencies) where the host says, and ``gpu_node``
        (the device's NUMA node, :func:`..hardware.gpu_numa_node`). A host-bound time can follow the core
        it was issued from: these let an analysis compare windows by place (H200 session 27)."""
        both = [start, end if end is not None else (None, None, None)]
        window["timer_cpu"] = [p[0] for p in both]
        if any(p[1] is not None for p in both):
            window["timer_node"] = [p[1] for p in both]
        if any(p[2] is not None for p in both):
            window["timer_mhz"] = [p[2] for p in both]
        if self._gpu_node is _UNSET:
            from ..hardware import gpu_numa_node

            self._gpu_node = gpu_numa_node(self.device)
        if self._gpu_node is not None:
            window["gpu_node"] = self._gpu_node

    def _nvml_probe(self) -> Any:
        """This device's :class:`..hardware.NvmlProbe` (made on first use), or None off CUDA."""
        if self.device.type != "cuda":
            return None
        probe = self.__dict__.get("_nvml")
        if probe is None:
            from ..hardware import NvmlProbe

            uuid = str(getattr(torch.cuda.get_device_properties(self.device), "uuid", "") or "")
            probe = self.__dict__["_nvml"] = NvmlProbe(uuid)
        return probe

    def context(self, problem: Problem, protocol: Protocol, run_seed: int,
                phase: dict[str, float] | None = None) -> ProblemContext:
        """The cached :class:`ProblemContext` (one problem kept at a time, to bound memory), made again
        when the reference budget (:meth:`ProblemContext.reference_budget_bytes`) has changed.

        While a new one is set up, its host work (the problem's module, its model built and copied on the
        host) runs with this slot's hold on the device given up (:meth:`_host_stretch`), and a timing window
        another slot queued goes first between the reference's evaluations (:meth:`_gpu_yield`); the seconds
        this slot waits for windows go to ``phase["yield_wait"]`` (``phase``: None, not recorded).

        Raises:
            ReferenceError_: the problem's own code fails.
            ValueError: ``KBENCH_REF_BUDGET_BYTES`` is not a non-negative integer.
        """
        key = (problem.code_sha256, protocol.fingerprint(), run_seed)
        budget = ProblemContext.reference_budget_bytes(self.device)
        if budget is not None and self.device.type == "cuda" and not os.environ.get(ProblemContext.REF_BUDGET_ENV):
            budget = int(budget * self.memory_share)  # the default share of the device, per slot on it
        ctx = self._contexts.get(key)
        if ctx is None or ctx.ref_budget_bytes != budget:
            self._free_contexts()
            del ctx
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            shared_device = self.memory_ledger is not None and (not self._alone or self._alone_fell)
            ctx, peak = _peak_during(self.device, lambda: ProblemContext(
                problem, protocol, run_seed, self.device, self.scratch, ref_budget_bytes=budget,
                memory_share=self.memory_share, shared_device=shared_device,
                host_stretch=lambda: self._host_stretch(phase), between=lambda: self._gpu_yield(None, phase)))
            # what setting this problem up took, for the set-up's claim when it is set up again
            self._setup_peaks[(problem.code_sha256, protocol.fingerprint())] = peak
            self._contexts[key] = ctx
        return ctx

    def _spin_cycles_per_ms(self) -> float | None:
        """The launch-hiding spin's cycles per ms on this slot's GPU, measured here for each candidate
        (a 1M-cycle spin, about 0.5 ms at full clocks; None on a CPU)."""
        if self.device.type != "cuda":
            return None
        return _timing.spin_cycles_per_ms(self.device)

    def measure_baselines(self, problem: Problem, protocol: Protocol, run_seed: int,
                          modes: list[str]) -> dict[str, TimingStats]:
        """Time the reference eager and under torch.compile in ``modes`` with the protocol's timer.

        Args:
            modes: ``"eager"`` and/or ``"compile:<mode>"`` names.

        Returns:
            Stats by mode name; a mode that fails (e.g. torch.compile error) is absent and its reason
            is in :attr:`last_baseline_info` (``context(...).baseline_info`` while the context lives).

        With other slots on the device (a memory ledger), the reference's set-up and the baselines' timing
        sets are claimed in it as a candidate's job's are (:meth:`_claim_for_setup`, :meth:`_plan_memory`),
        and given back at the end, a context holding more than :attr:`CONTEXT_KEEP_MAX_BYTES` freed first
        (inside the device lock's shared hold, before the claim goes).
        """
        own = not self._in_job  # inside a candidate's job the job's claim and plan already cover them
        self.last_baseline_info = {}
        with self._gpu_work():  # its untimed GPU work (the reference, torch.compile) holds the lock shared
            phase: dict[str, float] = {}
            try:
                if own:
                    self._claim_for_setup(problem, protocol, run_seed, phase)
                ctx = self.context(problem, protocol, run_seed)
                if own:
                    self._plan_memory(ctx, phase, baselines=True)
                settings = _timing.TimerSettings.from_protocol(protocol, self.device)
                fns = self._prepare_baselines(ctx, protocol, modes)
                blocks: dict[str, list[tuple[TimingStats, dict[str, Any]]]] = {}
                for mode, (fn, _compile_s) in fns.items():
                    self._time_baseline_block(ctx, mode, fn, settings, blocks)
                stats = self._finish_baselines(ctx, modes, fns, blocks, settings)
                self.last_baseline_info = {m: ctx.baseline_info.get(m) for m in modes}
                return stats
            finally:
                if own:
                    self._give_memory_back(free_contexts=True)
                    self._job_share = self.memory_share

    def baselines_with_info(self, problem: Problem, protocol: Protocol, run_seed: int,
                            modes: list[str]) -> tuple[dict[str, TimingStats], dict[str, Any]]:
        """:meth:`measure_baselines` with each mode's ``baseline_info`` (compile seconds, timing details, why a
        mode failed), kept from before the problem's context was freed (a large one is, with other slots
        on the device: it would otherwise stay allocated outside every claim while the slot waits).

        Returns:
            ``(stats, info)``: TimingStats by mode (a failed mode is absent) and its info dict by mode (None
            where there is none).
        """
        stats = self.measure_baselines(problem, protocol, run_seed, modes)
        return stats, {m: self.last_baseline_info.get(m) for m in modes}

    def _prepare_baselines(self, ctx: ProblemContext, protocol: Protocol,
                           modes: list[str]) -> dict[str, tuple[Callable[[int], Any], float]]:
        """A timing function per baseline mode not measured yet (torch.compile done here, outside any
        timing window), with its compile seconds; failures go to ``ctx.baseline_info``."""
        apply_tf32(protocol.tf32)
        stable_compile_cache_keys()  # the key the warm-up process stored this compile under (execution/warm.py)
        sets = [_cast_set(ctx.set_values(i), ctx.dtype, ctx.cast_all) for i in ctx.timing_sets]
        k = len(sets)
        # every mode's timing moves these sets to new memory between placements (protocol.placements)
        placer = _timing.Placer(sets, self.device)
        grad = torch.no_grad if protocol.reference_no_grad else torch.enable_grad
        out: dict[str, tuple[Callable[[int], Any], float]] = {}
        for mode in modes:
            if mode in ctx.baselines:
                continue
            try:
                if mode == "eager":
                    fn_model = ctx.model
                    compile_s = 0.0
                else:
                    cmode = mode.split(":", 1)[1]
                    torch._dynamo.reset()
                    fn_model = torch.compile(ctx.model, mode=cmode)
                    t0 = time.perf_counter()
                    with grad():
                        fn_model(*sets[0])
                    if self.device.type == "cuda":
                        torch.cuda.synchronize(self.device)
                    compile_s = time.perf_counter() - t0

                def fn(i: int, _m: Any = fn_model) -> Any:
                    with grad():
                        return _m(*sets[i % k])

                fn.relocate = placer  # type: ignore[attr-defined]  # what _time_baseline_block moves
                out[mode] = (fn, compile_s)
            except Exception as e:
                log.warning("%s: baseline %s failed: %s", ctx.problem.key, mode, e)
                ctx.baseline_info[mode] = {"error": f"{type(e).__name__}: {e}"[:2000]}
        return out

    def _time_baseline_block(self, ctx: ProblemContext, mode: str, fn: Callable[[int], Any],
                             settings: _timing.TimerSettings,
                             blocks: dict[str, list[tuple[TimingStats, dict[str, Any]]]]) -> None:
        """One timed block of a baseline, inside a timing window (the device's timing lock held)."""
        try:
            with self.timing_window(mode) as window:
                placer = getattr(fn, "relocate", None)
                try:
                    stats, info = _timing.time_callable(fn, self.device, settings, relocate=placer)
                finally:
                    if placer is not None:
                        placer.release()  # the earlier placements' copies, back to the driver
            info["window"] = window
            blocks.setdefault(mode, []).append((stats, info))
        except Exception as e:
            log.warning("%s: baseline %s failed: %s", ctx.problem.key, mode, e)
            ctx.baseline_info[mode] = {"error": f"{type(e).__name__}: {e}"[:2000]}

    def _finish_baselines(self, ctx: ProblemContext, modes: list[str],
                          fns: dict[str, tuple[Callable[[int], Any], float]],
                          blocks: dict[str, list[tuple[TimingStats, dict[str, Any]]]],
                          settings: _timing.TimerSettings) -> dict[str, TimingStats]:
        """Pool each mode's blocks into its stats and remember them in ``ctx`` (cached per problem)."""
        out: dict[str, TimingStats] = {}
        for mode in modes:
            if mode in ctx.baselines:
                out[mode] = ctx.baselines[mode]
                continue
            if mode not in blocks or "error" in (ctx.baseline_info.get(mode) or {}):
                continue
            stats, info = pool_blocks(blocks[mode], settings)
            out[mode] = stats
            ctx.baselines[mode] = stats
            ctx.baseline_info[mode] = {"compile_s": round(fns[mode][1], 3),
                                       **{kk: v for kk, v in info.items() if kk != "synced_ms"}}
        return out

    def evaluate(self, job: EvalJob) -> EvalResult:
        """Evaluate one candidate end to end. Never raises for candidate failures (they are outcomes).

        Its GPU work outside timing windows (the reference, the candidate's correctness trials, the
        comparisons) holds the device's host-wide lock shared (:meth:`_gpu_work`), so another slot on
        the same GPU (``--gpus 0,0``) never times while this one computes.

        Returns:
            The :class:`EvalResult`; baselines measured on the way are in ``extra["baselines"]``
            (mode -> TimingStats dict) so the caller can store them.
        """
        with self._gpu_work():
            self._in_job = True
            if self.memory_ledger is not None:
                # a large problem, run one per GPU at a time: its claims draw on the lane's reserve, and what it
                # gives back is kept there for the next (see memledger)
                self.memory_ledger.lane = bool(job.large)
            # (lane_priority) the lane's job computes with the device: other slots' windows wait to be queued
            self._lane_job = bool(job.large) and self.lane_priority
            self._set_lane(True)
            # (lane_exclusive) another slot's large job computes: this job's device work starts after it
            lane_start_wait = self._gpu_yield(None) if self._lane_holds_device() else 0.0
            try:
                _device_peak(self.device, reset=True)
                res = self._evaluate(job)
                if self.memory_ledger is not None and self.device.type == "cuda" and (
                        (res.outcome is Outcome.OOM and not res.error.startswith("resident memory"))
                        or res.extra.get("trusted_oom")) \
                        and not any(f.severity in (Severity.CHEAT, Severity.TIMING) for f in res.findings):
                    # (a cheat or a timing violation found before it ran out stands: no second run to pass)
                    # out of device memory beside the other slots' jobs (the candidate, or the trusted side
                    # setting up, staging, judging): the memory may have been theirs. Once more with the whole
                    # device claimed, so an oom verdict is the candidate's own and the harness's is rare
                    first = res
                    if self.memory_ledger is not None:
                        # a re-run with the whole device claimed is not the lane's: what it gives back is not kept
                        self.memory_ledger.lane = False
                    self._give_memory_back()
                    self._alone, self._alone_fell = True, False
                    _device_peak(self.device, reset=True)
                    try:
                        res = self._evaluate(job)
                        res = self._alone_verdict(first, res)
                    finally:
                        self._alone = False
                peak = _device_peak(self.device)
                if peak is not None:  # the most this process's allocator held during the job, beside its claim
                    res = res.with_(extra={**res.extra, "trusted_device_peak_bytes": peak})
                if lane_start_wait > 0:
                    res = res.with_(phase_s={**res.phase_s, "lane_start_wait": round(lane_start_wait, 3)})
                return res
            finally:
                self._in_job = False
                self._set_lane(False)
                self._lane_job = False
                try:
                    self._give_memory_back(free_contexts=True)
                finally:
                    if self.memory_ledger is not None:
                        self.memory_ledger.lane = False
                self._job_share = self.memory_share

    def _alone_verdict(self, first: EvalResult, res: EvalResult) -> EvalResult:
        """The result of a re-run with the whole device claimed (``res``) after ``first`` ran out of device
        memory beside other slots' jobs, while the claim is still held.

        - Where another slot held a claim meanwhile (its wait for memory ran out, or this one's did), the
          re-run was not alone: the candidate's ``oom`` in it is marked the harness's (``harness_error``,
          ``rerun_not_alone``: evaluated again on resume).
        - The trusted side running out of memory stays the harness's too (``trusted_oom``) even alone: the
          harness's own copies have caused it before (H200 session 10, L1/19). ``--resume`` evaluates such a
          turn again a bounded number of times (:meth:`.store.Store.retryable_attempts`), so a candidate that
          holds memory on purpose gets no verdict in its favour and no endless re-evaluation.
        - The candidate's device ``oom`` in it (not the host's ``resident memory`` limit) is the harness's too
          (``harness_error``, ``trusted_held``: the trusted process's allocated share of the device; a candidate
          that only claims to have run out gains a bounded number of re-evaluations, never a pass) where the
          trusted process itself held half of the device or more when
          the candidate ran out (``trusted_memory``, read then: :meth:`_finish`). H200 session 16: L1/96's
          reference, as its own candidate, ran out alone while the trusted side held 52% of the device by that
          reading; the same candidate had passed in the cold run.
        - Findings of the first run are kept (a cheat found before it ran out is not forgotten).
        """
        overcommitted = self._alone_fell or (self.memory_ledger is not None and self.memory_ledger.others() > 1e-9)
        extra = {**res.extra, "rerun_alone": True,
                 "oom_beside_others": {"error": first.error[:2000], "memory_claim": first.extra.get("memory_claim")}}
        if overcommitted and res.outcome is Outcome.OOM:
            extra.update({"harness_error": True, "rerun_not_alone": True})
        tm = res.extra.get("trusted_memory") or {}
        held, total = tm.get("allocated_bytes"), tm.get("device_total_bytes")
        if res.outcome is Outcome.OOM and not res.error.startswith("resident memory") \
                and isinstance(held, int) and isinstance(total, int) and total > 0 and 2 * held >= total:
            extra.update({"harness_error": True, "trusted_held": round(held / total, 3)})
        seen = {(f.check, f.message) for f in res.findings}
        findings = tuple(res.findings) + tuple(f for f in first.findings if (f.check, f.message) not in seen)
        return res.with_(findings=findings, extra=extra)

    def _other_lock_files(self) -> list[str]:
        """The run's other lock files a candidate's process could take to stall the slots: the memory
        ledger's and the large-warm-up lock of this device."""
        out = []
        lock = getattr(self.memory_ledger, "lock", None)
        if getattr(lock, "path", None):
            out.append(str(lock.path))
        if self.host_lock_key:
            from .warm import warm_big_lock

            big = warm_big_lock(self.host_lock_key)
            out += [str(big.path), str(big.turn_path)]
        return out

    def _give_memory_back(self, free_contexts: bool = False) -> None:
        """End this job's claim in the memory ledger (if any), the allocator's cache handed back first; with
        ``free_contexts`` (a candidate's job ends), the cached problem contexts too where this process holds
        more than :attr:`CONTEXT_KEEP_MAX_BYTES` of the device (:meth:`measure_baselines` keeps each mode's
        info in :attr:`last_baseline_info` first)."""
        self._job_claim = 0.0  # (the job's result has recorded it)
        if self.memory_ledger is None:
            return
        if self.device.type == "cuda":
            # what this job's plan set aside (timing copies, baseline sets, outputs) goes back to the driver
            # before its claim does: another slot may plan for it at once
            try:
                torch.cuda.synchronize(self.device)
                if free_contexts and torch.cuda.memory_allocated(self.device) > self.CONTEXT_KEEP_MAX_BYTES:
                    # the problem's context (models, stored references) would stay allocated outside any
                    # claim while this slot waits for its next job (H200 session 13: five idle slots held
                    # 23 GiB while L1/45 ran out of memory with the whole device claimed); a later job of
                    # the same problem sets it up again
                    self._free_contexts()
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001 - a device fault is reported by the job itself
                pass
        self.memory_ledger.release()

    #: with a memory ledger, a slot keeps its last problem's context between jobs only while its process
    #: has at most this many bytes of the device allocated
    CONTEXT_KEEP_MAX_BYTES = 512 << 20

    def _free_contexts(self) -> None:
        """Free every cached :class:`ProblemContext` (their device memory goes back to the allocator)."""
        for k in list(self._contexts):
            self._contexts.pop(k).free()

    #: the longest a job waits for its share of the device's memory before it plans for the fixed share
    MEMORY_WAIT_MAX_S = 300.0
    #: the longest a job granted its claim waits for the device to have that much memory free
    PHYSICAL_WAIT_MAX_S = 120.0
    #: how often it looks
    PHYSICAL_POLL_S = 0.1

    def _wait_device_free(self, need_bytes: int, give_lock_up: Callable[[], None], wait_s: float) -> float:
        """Wait until the device has ``need_bytes`` free (``torch.cuda.mem_get_info``, every process counted,
        this process's allocator cache handed back first), at most ``wait_s`` seconds; then go on whatever
        is free (the job may still fit, and an out-of-memory on the trusted side is a harness error that
        ``--resume`` evaluates again). Calls ``give_lock_up`` before the first wait.

        The ledger bounds what the run's slots' jobs claim; this covers memory outside it: the warm-up
        pool's compiles, a job that used more than its claim, buffers kept from a process that would not
        die, another run on the device.

        Returns:
            the seconds waited (0.0 when the memory was free at once or cannot be read).
        """
        if need_bytes <= 0 or self.device.type != "cuda":
            return 0.0
        t0 = time.monotonic()
        first = True
        while True:
            try:
                torch.cuda.empty_cache()
                free, _total = torch.cuda.mem_get_info(self.device)
                mine = int(torch.cuda.memory_allocated(self.device))  # the job's own, already in place
            except Exception:  # noqa: BLE001 - unknown: go on
                return 0.0
            if free + mine >= need_bytes:
                return time.monotonic() - t0 if not first else 0.0
            waited = time.monotonic() - t0
            if waited >= wait_s:
                log.warning("the device has %.1f GiB free after %.0f s, this job claimed %.1f GiB; going on",
                            free / 2**30, waited, need_bytes / 2**30)
                return waited
            if first:
                give_lock_up()
                first = False
            time.sleep(self.PHYSICAL_POLL_S)

    def _plan_memory(self, ctx: ProblemContext, phase: dict[str, float], baselines: bool = False) -> None:
        """Choose the share of the device's memory this job plans for (its shared input sets and timing
        copies): the fixed ``memory_share`` without a ledger; with one (several slots on this GPU), by the
        problem's sizes (:func:`.memledger.memory_need`, :func:`.memledger.job_share`). While it waits for
        memory, this slot gives the device's host lock up (the other slots' timing windows must go on for
        their memory to come back). ``baselines``: this job also times eager and torch.compile (their
        copies of the timing sets count). Sets ``ctx.memory_share``; adds ``memory_wait`` (s) to ``phase``
        when it waited."""
        share = self.memory_share
        held, self._job_claim = self._job_claim, 0.0
        led = self.memory_ledger
        if led is not None and self.device.type == "cuda":
            from .memledger import UTIL, job_share, memory_need

            total = int(torch.cuda.get_device_properties(self.device).total_memory)
            plan_at = self._planner(ctx, total, baselines=baselines)
            need = memory_need(plan_at, total)
            if held > 0 and not self._alone:
                # the set-up's claim (_claim_for_setup) goes back before the plan's is asked for: a job that
                # held it while waiting for a larger one could wait on another doing the same (H200
                # session 12: two slots, each holding its set-up claim, waited for each other until the run
                # was cut). The reference's set-up temporaries go back with it.
                torch.cuda.empty_cache()
                led.release(between=True)
            with self._lock_given_up_while_waiting() as give_lock_up:
                if self._alone and held >= 1.0 - 1e-9:  # the whole device, claimed before the set-up: kept,
                    # planned for only if the others had given theirs back (not after the wait ran out)
                    self._job_claim, waited = held, 0.0
                    share = self.memory_share if self._alone_fell else 1.0
                elif self._alone:  # a re-run after running out of memory beside others: the whole device
                    self._job_claim, waited, fell = led.claim([1.0], wait_s=self.MEMORY_WAIT_MAX_S,
                                                              fallback=need.claim_of(plan_at(self.memory_share)),
                                                              on_wait=give_lock_up)
                    self._alone_fell = self._alone_fell or fell
                    share = self.memory_share if fell else 1.0
                else:
                    share, self._job_claim, waited = job_share(led, need, self.memory_share,
                                                               plan_at(self.memory_share),
                                                               wait_s=self.MEMORY_WAIT_MAX_S, on_wait=give_lock_up,
                                                               lean=bool(led.lane))
                physical = self._wait_device_free(int(self._job_claim * UTIL * total), give_lock_up,
                                                  self.PHYSICAL_WAIT_MAX_S)
                if physical:
                    phase["memory_wait_physical"] = phase.get("memory_wait_physical", 0.0) + physical
            if waited > 0:
                phase["memory_wait"] = phase.get("memory_wait", 0.0) + waited
        self._job_share = share
        ctx.memory_share = share

    @contextlib.contextmanager
    def _lock_given_up_while_waiting(self) -> Iterator[Callable[[], None]]:
        """Yields ``give_lock_up()``: called before a wait for memory, it gives up this slot's shared hold on
        the device's host lock (the other slots' timing windows must go on for their memory to come back);
        the hold is taken back on leaving. Calling it again does nothing."""
        released: list[HostDeviceLock] = []

        def give_lock_up() -> None:
            lk = self._gpu_share
            if lk is not None and not released:
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                self._set_lane(False)
                lk.release()
                released.append(lk)
        try:
            yield give_lock_up
        finally:
            for lk in released:
                self._retake_shared(lk)

    def _retake_shared(self, lk: HostDeviceLock, deadline: float | None = None) -> None:
        """:meth:`_take_shared`, with the lock files gone or unreadable (``OSError``) as :class:`HostLockLost` and
        this slot's hold forgotten. ``TimeoutError`` (``deadline`` passed) goes to the caller."""
        try:
            self._take_shared(lk, deadline)
        except TimeoutError:  # (an OSError too)
            raise
        except OSError as e:
            self._gpu_share = None
            raise HostLockLost(f"taking the device's host lock back failed: {e}") from None

    def _claim_device_alone(self, phase: dict[str, float]) -> None:
        """Before the problem's reference is set up for a re-run after the trusted side ran out of memory
        beside other slots' jobs: claim the whole device in the memory ledger and wait for its memory to be
        free (at most :attr:`MEMORY_WAIT_MAX_S` and :attr:`PHYSICAL_WAIT_MAX_S`). No-op without a ledger."""
        led = self.memory_ledger
        if led is None or self.device.type != "cuda":
            return
        from .memledger import UTIL

        total = int(torch.cuda.get_device_properties(self.device).total_memory)
        fell = self._claim_and_wait(1.0, int(UTIL * total), phase)
        self._alone_fell = self._alone_fell or fell  # claimed after the wait whatever the others hold

    #: a problem whose set-up takes at least this many bytes claims memory before its reference is set up
    SETUP_CLAIM_MIN_BYTES = 256 << 20

    def _claim_for_setup(self, problem: Problem, protocol: Protocol, run_seed: int, phase: dict[str, float]) -> None:
        """Claim, in the memory ledger, what setting up ``problem``'s reference takes, before it is set up:
        what it took when this slot last set it up (its forward temporaries, weights and stored references
        included), else its input set (sized from meta tensors: nothing drawn) taken as the size of its
        outputs too, by :meth:`work_nbytes`, and its weights (also from meta tensors; with their float64
        twin's where outputs are judged against float64). Only for :attr:`SETUP_CLAIM_MIN_BYTES` or more
        whose context is not cached; :meth:`_plan_memory` then replaces the claim with its plan's.

        Without it (H200 session 12) six slots set up 6 GiB references at once: draws the device refused
        fell back to the host (sets that could then not be drawn again on the device, and host memory enough
        for the kernel to kill slot workers), and references ran out of memory at set-up. A problem whose
        set-up is dominated by its forward's temporaries (L3/31's attention, tens of GiB from small inputs)
        is claimed only from its second set-up on in a slot: the first has nothing to go by."""
        led = self.memory_ledger
        if led is None or self.device.type != "cuda" \
                or (problem.code_sha256, protocol.fingerprint(), run_seed) in self._contexts:
            return
        from .memledger import UTIL
        from .warm import meta_input_nbytes, meta_weight_nbytes

        need = self._setup_peaks.get((problem.code_sha256, protocol.fingerprint()), 0)
        try:
            mod = _exec_problem(problem)
            set_nb, weight_nb = meta_input_nbytes(torch, mod), meta_weight_nbytes(torch, mod)
        except ReferenceError_:
            set_nb = weight_nb = 0  # reported when the context is set up
        fp64 = protocol.judge == "fp64-bound"
        sets = self.work_nbytes(set_nb, set_nb, fp64, own_copies=0) if set_nb >= self.SETUP_CLAIM_MIN_BYTES else 0
        # the reference's weights on the device, at most float32, and their float64 twin's
        need = max(need, sets + weight_nb * (3 if fp64 else 1))
        if need < self.SETUP_CLAIM_MIN_BYTES:
            return
        total = int(torch.cuda.get_device_properties(self.device).total_memory)
        # (a large job's set-up claim leaves the rest of the lane's reserve reserved for its plan's claim)
        self._claim_and_wait(min(1.0, need / (UTIL * total)), min(need, int(UTIL * total)), phase, keep_reserve=True)

    def _claim_and_wait(self, claim: float, need_bytes: int, phase: dict[str, float], keep_reserve: bool = False) -> bool:
        """Claim ``claim`` in the memory ledger (taken whatever the others hold after
        :attr:`MEMORY_WAIT_MAX_S`), then wait for ``need_bytes`` of the device to be free (at most
        :attr:`PHYSICAL_WAIT_MAX_S`), this slot's hold on the host lock given up while waiting; the seconds
        go to ``phase["memory_wait"]``. ``keep_reserve``: see :meth:`.memledger.MemoryLedger.try_claim`.
        Returns whether the claim came after its wait ran out."""
        with self._lock_given_up_while_waiting() as give_lock_up:
            self._job_claim, waited, fell = self.memory_ledger.claim(
                [claim], wait_s=self.MEMORY_WAIT_MAX_S, fallback=claim, on_wait=give_lock_up,
                keep_reserve=keep_reserve)
            waited += self._wait_device_free(need_bytes, give_lock_up, self.PHYSICAL_WAIT_MAX_S)
        if waited > 0:
            phase["memory_wait"] = phase.get("memory_wait", 0.0) + waited
        return fell

    def _planner(self, ctx: ProblemContext, total: int, baselines: bool = False) -> Callable[[float], Any]:
        """share -> :class:`.memledger.Plan` for ``ctx``'s problem on this device: the exchange
        :func:`share_plan` picks (as :meth:`_share_sets` would), the timing sets :func:`timing_set_count`
        allows (as :attr:`ProblemContext.timing_sets`), and the bytes they set aside with the stored
        references; with ``baselines``, also the trusted side's cast copies of the timing sets and one
        output (:meth:`_prepare_baselines`)."""
        from .memledger import Plan

        set_nb = int(ctx.share_set_nbytes)
        out_nb = self._share_out_nbytes(ctx)
        sharing = self._share_ok is not False and ctx.share_places is not None and set_nb > 0
        refs = 0 if ctx.lazy_refs else int(ctx.ref_estimate_bytes)
        temps = DeviceEvaluator.judging_sizes(ctx)
        weights = self.weights_nbytes(int(getattr(ctx, "weight_init_bytes", 0)), int(getattr(ctx, "weight_bytes", 0)),
                                      int(getattr(ctx, "weight64_bytes", 0)),
                                      ablation=bool(getattr(ctx.protocol, "ablate_kernels", True)))
        # the sets the candidate's process keeps copies of (worker.py, load_set): a large job only the latest,
        # smaller ones up to eight; none where every set is mapped and used as it is
        large = getattr(ctx, "large", set_nb + int(ctx.out_nbytes) >= LARGE_SET_BYTES)
        kept = 1 if large else min(int(ctx.n_sets), 8)
        casts = bool(getattr(ctx, "cast_copies", False))

        def plan_at(share: float) -> Plan:
            cap = int(total * share)
            ex = (share_plan(ctx.n_sets, set_nb, out_nb, cap, self.SHARE_MAX_FRACTION) if sharing else None) or "files"
            own = 1 if ex == "staged" else kept if ex == "files" or casts else 0
            work = self.work_nbytes(set_nb, int(ctx.out_nbytes), ctx.fp64_judge, own_copies=own, **temps)
            k = timing_set_count(ctx.protocol.rotate_inputs, ctx.n_correct, set_nb, cap)
            shared = {"all": ctx.n_sets * set_nb + out_nb, "staged": set_nb + out_nb, "files": 0}[ex]
            base = k * set_nb + int(ctx.out_nbytes) if baselines else 0
            # the timing copies live in the candidate's process while it is timed, the judging's memory while
            # it is judged (handed back after): the larger of the two, not both
            return Plan(ex, k, shared + max((2 * k + 1) * set_nb, work) + refs + base + weights)
        return plan_at

    @staticmethod
    def judging_sizes(ctx: Any) -> dict[str, int]:
        """What :meth:`work_nbytes` takes of a :class:`ProblemContext` beside the set's and outputs' bytes (keyword
        arguments): the reference's forward temporaries, and where the context measured them, the set's float64
        upcast and a refresh's buffers (set 0) and the float64 twin's outputs (``out64_nbytes``)."""
        sizes = {"temp_bytes": int(getattr(ctx, "ref_temp_bytes", 0)),
                 "temp64_bytes": int(getattr(ctx, "ref64_temp_bytes", 0))}
        for k in ("set64_nbytes", "refresh_nbytes"):
            v = getattr(ctx, k, None)
            if isinstance(v, int) and v > 0:
                sizes[k] = v
        twin = getattr(ctx, "out64_nbytes", None)
        if getattr(ctx, "fp64_judge", False) and isinstance(twin, int) and twin > 0:
            sizes["out64_nbytes"] = twin
        return sizes

    @staticmethod
    def weights_nbytes(init_bytes: int, device_bytes: int, device64_bytes: int, *, ablation: bool = True) -> int:
        """The device memory a job's weights take (bytes), counted in its claim beside the rest: in the
        candidate's process, its ``ModelNew`` (taken to be as large as the reference as constructed,
        ``init_bytes``) and, with ``ablation`` (the protocol's ``ablate_kernels``), the copy the kernel-ablation
        call makes of it (worker.py, ``_ablation``; freed after the call, but kept in the process's allocator
        cache unless the job is large); on the trusted side, the reference at the run's precision
        (``device_bytes``) and its float64 twin (``device64_bytes``), kept while the problem's context lives.

        Uncounted (H200 session 14), L3/2 (8 GiB of weights, 8 MiB of inputs) held 44 GiB on a claim of the
        4.9 GiB floor, and L2/55, 56 and 59 (4 GiB) 24 GiB each.
        """
        return (2 if ablation else 1) * init_bytes + device_bytes + device64_bytes

    @staticmethod
    def work_nbytes(set_nbytes: int, out_nbytes: int, fp64_judge: bool, *, own_copies: int = 1,
                    temp_bytes: int = 0, temp64_bytes: int = 0, set64_nbytes: int | None = None,
                    out64_nbytes: int | None = None, refresh_nbytes: int | None = None) -> int:
        """The device memory a job uses while it is judged beyond its shared buffers (bytes), counted in its
        claim in the memory ledger in place of the timing copies where it is larger:

        - the candidate's process during a correctness call: the clone it calls the model on and the
          pristine copy it checks for writes into the inputs, the copies of sets it keeps of its own
          (``own_copies``: sets that came through the staging buffer or files, or were cast from the mapped
          ones), its output and the freed block poisoned before the call (twice the output), and the
          forward's temporaries, taken to be the reference's (``temp_bytes``);
        - the trusted side's judging (after each correctness call, and in every mode after the timing and
          the kernel-ablation call, where the reference runs again on a refreshed set): the set drawn again,
          the reference's output, the candidate's output copied out and the forward's temporaries; judging
          against float64, also the set's and the output's float64 upcasts, with the larger of the two
          forwards' temporaries (the first's are freed before the second runs).

        For a large job (set and outputs of :data:`.tensorio.LARGE_SET_BYTES` or more) the two take turns,
        and the larger of the two counts (with the candidate's own copy of the set and its timing buffer
        beside the judging); for a smaller one, their sum. A large job's judging evaluates the float64 twin
        and the reference one after the other, each on its own copy of the set
        (:meth:`ProblemContext._compare_once`), so its trusted side holds the candidate's output and the
        most of: a set and its upcast (3 sets), the upcast and the twin's outputs (2 sets and 2 outputs, and
        the twin's temporaries), a set refreshed beside them (2 and 2), and the twin's outputs, a set and the
        reference's outputs (1 set and 3 outputs, and the reference's temporaries); without the float64
        judge, the most of a set refreshed (2 sets) and a set with the reference's outputs. Before (H200
        session 17) one copy of the set served both forwards and a large job's trusted side counted 3 sets
        and 4 outputs (42 GiB for L1/19's 6 GiB set and output; now 30). For small problems this is far below the ledger's floor; for level 1's
        6-16 GiB sets it is tens of GiB. Counted short (H200 sessions 12 and 13), the trusted side ran out of
        memory: without the judging in 13 of 25 large jobs; with one copy of the set counted in the
        candidate's process where it holds three, L1/45 (16 GiB sets) even with the device to itself.

        Args:
            set_nbytes: one input set's bytes; out_nbytes: one set's reference outputs' bytes.
            fp64_judge: outputs are judged against a float64 evaluation of the reference.
            own_copies: sets the candidate's process keeps copies of (a large job keeps one).
            temp_bytes, temp64_bytes: the reference's forward temporaries beyond its outputs, at the run's
                precision and in float64 (:attr:`ProblemContext.ref_temp_bytes`; 0 where not measured).
            set64_nbytes, out64_nbytes: the set's float64 upcast and the twin's outputs (None: twice the set's and
                the outputs' bytes, as for float32; four times for half precision).
            refresh_nbytes: what refreshing a set for a timed round holds beyond the set (None: the set's bytes,
                one buffer as for a float32 set at float32; :attr:`ProblemContext.refresh_nbytes`).
        """
        s, o = set_nbytes, out_nbytes
        u = 2 * s if set64_nbytes is None else set64_nbytes
        o64 = 2 * o if out64_nbytes is None else out64_nbytes
        r = s if refresh_nbytes is None else refresh_nbytes
        candidate = (2 + own_copies) * s + 2 * o + temp_bytes
        if s + o >= LARGE_SET_BYTES:
            # a large job takes turns: the candidate's process hands its call's copies back before it
            # reports an output (worker.py, release_large), and the trusted side its judging's temporaries
            # and its copy of the output before the next call (_hand_back_judging); what stays in the
            # candidate's process while the trusted side judges: its own copy of the set and, after timing,
            # the timing buffer the in-place re-check writes into. The judging's phases, in order
            # (ProblemContext._compare_once): a set drawn and refreshed; it and its upcast; the upcast, the
            # twin's outputs and temporaries; those outputs beside a second set drawn and refreshed; and
            # beside that set, the reference's outputs and temporaries
            if fp64_judge:
                judging = max(s + r, s + u, u + o64 + temp64_bytes, o64 + s + r, o64 + s + o + temp_bytes)
            else:
                judging = max(s + r, s + o + temp_bytes)
            return max(candidate, o + judging + (1 + min(own_copies, 1)) * s)
        # a smaller job judges with one copy of the set: the set drawn and refreshed, with its upcast; the set, the
        # upcast and the reference's outputs; the upcast, those outputs and the twin's (each phase with the
        # candidate's output). Never less than the sum counted before the phases were (a float32 set's judging
        # then counted 3 sets and 4 outputs): small claims stay as they were where that was enough
        if fp64_judge:
            phases = o + max(s + r + u, max(s, r) + u + o + temp_bytes, u + o + o64 + temp64_bytes)
            summed = s + 2 * o + temp_bytes + 2 * s + 2 * o + max(0, temp64_bytes - temp_bytes)
        else:
            phases = o + max(s + r, s + o + temp_bytes)
            summed = s + 2 * o + temp_bytes
        return candidate + max(phases, summed)

    @contextlib.contextmanager
    def _gpu_work(self) -> Iterator[None]:
        """Hold the device's :class:`.scratch.HostDeviceLock` shared for a stretch of untimed GPU work;
        :meth:`timing_window` gives it up for the window (the window takes the lock exclusively, and
        waits for every other slot's and warm-up's shared stretch to end) and takes it back after.
        Without a host lock key (the CPU) this does nothing."""
        if not self.host_lock_key or self._gpu_share is not None:
            yield
            return
        lk = HostDeviceLock(self.host_lock_key)
        lk.acquire(shared=True)
        self._gpu_share = lk
        try:
            yield
        finally:
            self._set_lane(False)
            self._gpu_share = None
            lk.release()

    @contextlib.contextmanager
    def _host_stretch(self, phase: dict[str, float] | None = None) -> Iterator[None]:
        """Trusted host work inside a job that does no device work (the reference's module executed, its
        model built and copied on the host: 10-22 s for KernelBench's largest level-2 and level-3 models): this
        slot's shared hold on the device's host lock (:meth:`_gpu_work`) is given up for it and taken back
        after, once no window of the run is queued (:meth:`_take_shared`). Held through it, a timing window
        queued meanwhile waited for all of it, and the other slots for that window (H200 session 18: windows
        waited 19.5 s and 14.6 s for L3/2's set-up and construction). The seconds spent taking the hold back
        go to ``phase["yield_wait"]``. Without a hold (the CPU, or already given up) this does nothing.

        Raises:
            HostLockLost: the hold could not be taken back (the lock files went away).
        """
        if self._gpu_share is None or self._host_off:
            yield
            return
        self._host_off = True
        back_from = 0.0  # when the hold began to be taken back
        try:
            with self._lock_given_up_while_waiting() as give_lock_up:
                give_lock_up()
                try:
                    yield
                finally:
                    self._host_off = False
                    back_from = time.perf_counter()
        finally:
            self._host_off = False
            if phase is not None and back_from:
                phase["yield_wait"] = phase.get("yield_wait", 0.0) + time.perf_counter() - back_from

    #: in a candidate's steps that are host work (its build: the candidate's module imported; its
    #: construction: ``ModelNew`` built on the host, weights carried, moved to the device), the trusted side
    #: looks this often (s) for a timing window queued by another slot, and lets it in mid-step
    #: (:meth:`_gpu_yield` with ``midstep``)
    MIDSTEP_POLL_S = 0.05
    #: the ``phase_s`` keys the candidate's process measures and sends with "done" (:mod:`.worker`); any other
    #: key it sends is dropped
    CHILD_PHASES = frozenset({"construct", "trial_load", "trial_call", "trial_call_first", "trial_checks", "time",
                              "jit_compile", "jit_compiles"})
    #: a candidate's process stopped mid-step may have device work in flight that its import or constructor
    #: started (a tensor made on the device, a copy of its weights): the lock is given up this long (s) after
    #: the stop, when an honest candidate's has finished. It checks nothing: a kernel launched to run for
    #: seconds runs on into the other slot's window, as one launched by a thread of the candidate's just after
    #: it answered could already between steps (noticed in review, not closed)
    MIDSTEP_GRACE_S = 0.05

    def _profiles_calls(self) -> bool:
        """Whether a correct candidate's forward call is profiled (kernel share, streams, launch witness): on a
        CUDA device only (there is no CUDA profiler elsewhere)."""
        return self.device.type == "cuda"

    def _gpu_yield(self, h: ChildHandle | None, phase: dict[str, float] | None = None,
                   deadline: float | None = None, midstep: bool = False) -> float:
        """Let a timing window that another slot (or run) queued on this device go first: where this
        slot holds the host lock shared (:meth:`_gpu_work`) and a window is queued (another of the run's
        slots flags one in ``window_queue``, or someone waits at the lock's turnstile,
        :meth:`.scratch.HostDeviceLock.contended`), finish this process's GPU work, stop the
        candidate's process (SIGSTOP, its process group when sandboxed: no thread of it runs while
        the other slot times), give the lock up and take it back shared once no window is queued,
        then let the process go on.

        Call it where the candidate's process waits for the trusted side's next command: its honest GPU
        work is then finished (each of its answers follows a device synchronisation). Inside a step of host
        work (``midstep``: the candidate's build or construction, where an honest candidate launches little
        or nothing) it is stopped where it is, and the lock goes :attr:`MIDSTEP_GRACE_S` later.
        Without this, a window waits for every other slot's whole candidate (process start, build,
        correctness, rechecks: seconds); with it, for the step a slot is in.

        Args:
            h: the candidate's process, or None.
            phase: where the seconds spent waiting are added up (``yield_wait``), or None.
            deadline: ``time.monotonic()`` by which the lock must be back (the candidate's own time
                limit); None: no limit.
            midstep: the candidate's process is inside a step of host work (build, construction), not
                waiting for a command: a window must be seen queued twice 2 ms apart (another acquirer passes
                through the lock's turnstile for an instant too), the lock is given up :attr:`MIDSTEP_GRACE_S`
                after the process is stopped, taking it back is not bounded by ``deadline`` (the stopped
                process's time does not run; the caller moves its deadline by the wait), and the yield counts
                in ``phase["midstep_yields"]`` too.

        Returns:
            Seconds waited (0.0 when nobody was queued, no host lock is held, or, mid-step, the process had
            already answered when it was stopped: the step had ended): the caller moves the candidate's deadline
            by as much.

        Raises:
            ChannelError: the candidate's own process holds or waits for the device lock's files (it
                could stall every slot on the device); the process is killed.
            ChannelTimeout: between steps, the lock was not back by ``deadline``; the process is killed.
            HostLockLost: the lock could not be taken back at all (a harness error).
        """
        lk = self._gpu_share
        if lk is None or self._host_off:
            return 0.0
        try:
            # mid-step, a window must be seen queued: another acquirer passes through the turnstile for an
            # instant too (a shared hold taken back, another slot's look), so there it is looked at twice
            queued = self._windows_queued() or self._lane_holds_device()
            if not queued and lk.contended():
                if midstep:
                    time.sleep(0.002)
                queued = not midstep or lk.contended()
            if not queued:
                return 0.0
        except OSError:  # the lock files cannot be read: carry on holding the lock
            return 0.0
        if h is not None:
            tamper = sorted(pid for pid in lk.holders() | flock_holders(self._other_lock_files())
                            if in_tree(pid, h.pid))
            if tamper:
                h.kill("device lock tamper")
                raise ChannelError(f"the candidate's process {tamper[0]} holds or waits for the device's timing "
                                   "or memory lock files (it could stall every slot on the device)")
        t0 = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        timed_out = False
        with _stopped(h, self.sandbox_on):
            if midstep and h is not None and h.chan.pending():
                # the step ended (or its announced host work did) just before the stop: the process may have gone
                # on to device work already (a freshly compiled kernel launched after its "off" notice), so the
                # window is not let in here; the caller reads the message, and the next yield point comes soon
                return 0.0
            if midstep and h is not None:
                time.sleep(self.MIDSTEP_GRACE_S)
            self._set_lane(False)
            lk.release()
            try:
                # a process stopped mid-step is not let run out of time while it is stopped (its deadline moves by
                # the wait): only between steps, where its time is the step's, is the wait bounded by it
                self._retake_shared(lk, None if midstep else deadline)
            except TimeoutError:
                timed_out = True
        if timed_out:
            if h is not None:
                h.kill("timeout giving way to other slots' timing windows")
            try:  # the rest of this candidate's evaluation (and the baselines) still holds the lock
                lk.acquire(shared=True, timeout_s=self.QUEUE_WAIT_MAX_S)
            except (TimeoutError, OSError) as e:
                self._gpu_share = None
                raise RuntimeError(f"the device's host lock was not free again within "
                                   f"{self.QUEUE_WAIT_MAX_S:.0f} s: {e}") from None
            self._set_lane(True)
            raise ChannelTimeout("the device's lock was not free again before the candidate's time ran out")
        waited = time.perf_counter() - t0
        if phase is not None:
            phase["yield_wait"] = phase.get("yield_wait", 0.0) + waited
            phase["yields"] = phase.get("yields", 0.0) + 1.0
            if midstep:
                phase["midstep_yields"] = phase.get("midstep_yields", 0.0) + 1.0
        return waited

    def _evaluate(self, job: EvalJob) -> EvalResult:
        t_start = time.perf_counter()
        cand, protocol = job.candidate, job.protocol
        static = static_findings(cand.source)
        findings: list[Finding] = list(static)
        phase: dict[str, float] = {}
        at = [time.time()]  # epoch s of the job's steps before the candidate's (extra["steps"])
        if self._alone:
            self._claim_device_alone(phase)
        else:
            self._claim_for_setup(job.problem, protocol, job.run_seed, phase)
        at.append(time.time())
        names = ("setup_claim", "reference", "plan_memory")
        t_ref, waited0 = time.perf_counter(), phase.get("yield_wait", 0.0)
        try:
            ctx = self.context(job.problem, protocol, job.run_seed, phase)
        except ReferenceError_ as e:
            at.append(time.time())
            # out of device memory setting the reference up: the harness's failure (harness_error); any other
            # failure is the problem's (a bad problem file, an op this device lacks), before any candidate code
            # ran: the problem is flagged REFERENCE_FAILED and scored apart for every model, not held against this
            # one's candidate
            harness = e.oom and self.memory_ledger is not None and (not self._alone or self._alone_fell)
            return EvalResult(Outcome.RUNTIME_ERROR, error=f"reference failed: {e}", findings=tuple(findings),
                              device=str(self.device),
                              extra={"reference_error": True,
                                     "steps": [[n, round(a, 3), round(b, 3)] for n, a, b in zip(names, at, at[1:])],
                                     **({"harness_error": True, "trusted_oom": True} if harness else {}),
                                     **({} if e.oom else {"problem_flags": [REFERENCE_FAILED]})})
        # this job's own set-up: nothing where the context was kept from an earlier job (its setup_s is that
        # job's), and without the time its host stretches waited to take the hold back (in yield_wait)
        phase["reference"] = max(0.0, min(ctx.setup_s, time.perf_counter() - t_ref)
                                 - (phase.get("yield_wait", 0.0) - waited0))
        self._out_limit_bytes = max(self.OUT_LIMIT_FACTOR * int(ctx.out_nbytes),
                                    int(ctx.out_nbytes) + self.OUT_LIMIT_SLACK_BYTES)
        modes = ["eager", f"compile:{protocol.compile_mode}"]
        known = dict(job.baselines)
        at.append(time.time())
        self._plan_memory(ctx, phase, baselines=any(m not in known and m not in ctx.baselines for m in modes))
        at.append(time.time())
        # baselines timed in this job alternate with the candidate (protocol.alternate_rounds)
        measured: dict[str, TimingStats] = {}
        alternate = ([m for m in modes if m not in known and m not in ctx.baselines]
                     if protocol.alternate_rounds > 1 else [])
        before_run = list(findings)
        jobdir = Path(tempfile.mkdtemp(prefix="cand_", dir=self.scratch))
        try:
            res = self._run_candidate(job, ctx, jobdir, findings, phase, alternate=alternate, measured=measured)
        finally:
            shutil.rmtree(jobdir, ignore_errors=True)
        if res.extra.get("share_failed") and "out of memory" in res.error and self.memory_ledger is not None \
                and not self._alone:
            # mapping failed for want of device memory beside other slots' jobs: the harness's, evaluated again
            # with the device to itself (evaluate) rather than through files, whose copies of a level-1
            # problem's sets in host memory, six slots at a time, got slot workers killed (H200 session 12)
            return res.with_(extra={**res.extra, "harness_error": True, "trusted_oom": True})
        if res.extra.get("share_failed"):
            # the candidate's process could not map the shared buffers before any of its code ran (the
            # trusted side's own record, not text the candidate wrote): the candidate runs again with files,
            # and after SHARE_MAX_FAILURES such failures this device shares no more
            self._share_failures += 1
            log.warning("%s: %s; running it again with files%s", job.problem.key, res.error,
                        "; sharing switched off" if self._share_failures >= self.SHARE_MAX_FAILURES else "")
            if self._share_failures >= self.SHARE_MAX_FAILURES:
                self._share_ok = False
            findings = list(before_run)
            jobdir = Path(tempfile.mkdtemp(prefix="cand_", dir=self.scratch))
            try:
                res = self._run_candidate(job, ctx, jobdir, findings, phase, alternate=alternate, measured=measured,
                                          files_only=True)
            finally:
                shutil.rmtree(jobdir, ignore_errors=True)
        # baselines: only needed when the candidate produced a time
        after_steps: list[list[Any]] = []
        if res.candidate is not None:
            missing = [m for m in modes if m not in known and m not in measured]
            if missing:
                t0, t0_at = time.perf_counter(), time.time()
                measured.update(self.measure_baselines(job.problem, protocol, job.run_seed, missing))
                phase["baselines"] = phase.get("baselines", 0.0) + time.perf_counter() - t0
                after_steps.append(["baselines", round(t0_at, 3), round(time.time(), 3)])
            allb = {**known, **measured}
            eager = allb.get("eager")
            comp = allb.get(f"compile:{protocol.compile_mode}")
            res = res.with_(eager_ms=eager.value_ms if eager else None, compile_ms=comp.value_ms if comp else None)
            sp = [x for x in (res.speedup_eager, res.speedup_compile) if x is not None]
            if sp and max(sp) > 10:
                res = res.with_(findings=res.findings + (Finding("review.speedup", Severity.WARN, "review",
                                                                  f"speedup {max(sp):.1f}x > 10x: marked for review"),))
        # a baseline from the store counts as one measured here: its time was set by a host, maybe another one
        # (hosts lent as one kind ran host-bound times 2-3 times apart in H200 session 20)
        host_bound = host_bound_callables((res.extra or {}).get("timing_info") if res.candidate is not None else None,
                                          {m: ctx.baseline_info.get(m) if m not in known
                                           else (job.baseline_info or {}).get(m) for m in modes})
        if "candidate" in host_bound:
            res = res.with_(findings=res.findings + (Finding(
                "timing.host-bound", Severity.WARN, "host-bound",
                "the candidate's time is the host's time to issue its launches in most trials, not the GPU's: "
                "it repeats worse between processes than a GPU-bound time"),))
        cheats = cheat_findings(res.findings)
        if cheats and res.outcome is not Outcome.CHEAT:
            # a cheat voids the result whatever else happened (e.g. a reference subclass fails to import)
            res = res.with_(outcome=Outcome.CHEAT, tag=cheats[0].tag,
                            extra={**res.extra, "underlying_outcome": str(res.outcome)})
        phase["total"] = time.perf_counter() - t_start
        extra = dict(res.extra)
        extra["baselines"] = {m: s.to_dict() for m, s in measured.items()}
        extra["baseline_info"] = {m: ctx.baseline_info.get(m) for m in measured}
        if host_bound:
            extra["host_bound"] = host_bound
        if ctx.flags or host_bound:
            extra["problem_flags"] = list(ctx.flags) + (["host-bound"] if host_bound else [])
        extra.update(ctx.reference_info())  # reference_mode "lazy" | "stored", and what storing would cost
        extra["steps"] = ([[name, round(a, 3), round(b, 3)] for name, a, b in zip(names, at, at[1:])]
                          + list(extra.get("steps") or []) + after_steps)
        return res.with_(phase_s={**phase, **res.phase_s}, device=str(self.device), extra=extra)

    def close(self) -> None:
        for ctx in self._contexts.values():
            ctx.free()
        self._contexts.clear()
        self.launcher.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        self._scratch_fd = release_fd(self._scratch_fd)

    # -- internals -------------------------------------------------------------------------------
    def _sandbox_cfg(self, jobdir: Path, timeout_s: float) -> dict[str, Any] | None:
        if not self.sandbox_on:
            return None
        ncpu = os.cpu_count() or 1
        return {
            "private_dir": str(jobdir),
            "cpu_time_s": int(max(60.0, timeout_s) * ncpu),
            "file_size_bytes": max(8 << 30, 0),
            "address_space_bytes": self.memory_limit * 2 if self.device.type == "cpu" else 0,
            "limit_address_space": False,
            "extra_write_dirs": site_write_dirs(self.device.type),
            **(self.layers or {"new_netns": True, "landlock": True}),
        }

    SHARE_MAX_FRACTION = 0.35  # of the device's memory: larger input sets go through files
    SHARE_MAX_FAILURES = 2  # candidate processes that could not map the buffers before sharing stops
    STAGE_MAX_REQUESTS_PER_SET = 4  # need_set requests per input set a candidate's process may make

    @staticmethod
    def _share_out_nbytes(ctx: ProblemContext) -> int:
        """Bytes of the shared output buffer for ``ctx``'s problem: its outputs, rounded up, plus room to
        align each of up to 16 outputs."""
        return _devshare.round_up(int(ctx.out_nbytes)) + 16 * _devshare.ALIGN

    def _share_sets(self, ctx: ProblemContext) -> tuple[list[Any], dict[str, Any]] | None:
        """Fresh shared device buffers for one candidate (:mod:`.devshare`): every input set copied into
        one buffer each, and one for its outputs; or, where all the sets together would take more than
        ``SHARE_MAX_FRACTION`` of the device's memory but one set does not, a single staging buffer that
        the trusted side fills with the set the candidate's process asks for (``need_set``, see
        :meth:`_stage_set`). Returns the sets as the job describes them and the job's ``share`` entry, or
        None where the exchange goes through files (a CPU device, sharing unavailable or switched off,
        sets with nested values or whose sizes differ, one set too large, or an allocation the driver
        refuses)."""
        self._free_share()
        if self.device.type != "cuda" or self._share_ok is False or ctx.share_places is None:
            return None
        if self._share_ok is None:
            self._share_ok = _devshare.available(self.device)
            if not self._share_ok:
                return None
        out_nbytes = self._share_out_nbytes(ctx)
        plan = share_plan(ctx.n_sets, ctx.share_set_nbytes, out_nbytes,
                          planned_memory(self.device, self._job_share), self.SHARE_MAX_FRACTION)
        if plan is None:
            return None
        staged = plan == "staged"
        bufs: list[_devshare.SharedBuffer] = []
        sets: list[Any] = []
        try:
            if staged:
                bufs.append(_devshare.SharedBuffer(ctx.share_set_nbytes, self.device))
                sets = [{"__staged__": i} for i in range(ctx.n_sets)]
            else:
                for i in range(ctx.n_sets):
                    buf = _devshare.SharedBuffer(ctx.share_set_nbytes, self.device)
                    bufs.append(buf)
                    sets.append({"__seq__": "list", "items": self._fill_set(ctx, i, buf, i)})
            out = _devshare.SharedBuffer(out_nbytes, self.device)
            bufs.append(out)
            torch.cuda.synchronize(self.device)
        except Exception as e:  # noqa: BLE001 - out of memory, a refusal, an unsupported dtype: files
            log.info("%s: input sets go through files (%s: %s)", ctx.problem.key, type(e).__name__, e)
            for b in bufs:
                b.free()
            return None
        self._share_bufs, self._share_out, self._share_staged = bufs, out, staged
        self._stage_requests = 0
        share = {"sets": [{"handle": b.handle, "nbytes": b.nbytes} for b in bufs[:-1]],
                 "outputs": {"handle": out.handle, "nbytes": out.nbytes}, "staged": staged}
        return sets, share

    def _fill_set(self, ctx: ProblemContext, i: int, buf: _devshare.SharedBuffer, slot: int) -> list[Any]:
        """Copy input set ``i`` (drawn again, :meth:`ProblemContext.set_values`) into ``buf``, mapped by the
        candidate as shared buffer ``slot``; the set's items as the job describes them.

        Raises:
            DevShareError: the set differs in kind or size from set 0 (where the layout came from).
        """
        items: list[Any] = []
        vals = ctx.set_values(i)
        if len(vals) != len(ctx.share_places):  # type: ignore[arg-type]
            raise _devshare.DevShareError(f"input set {i} has {len(vals)} values, set 0 {len(ctx.share_places)}")
        for v, place in zip(vals, ctx.share_places):  # type: ignore[arg-type]
            if place is None:
                if isinstance(v, torch.Tensor):
                    raise _devshare.DevShareError(f"input set {i} differs in kind from set 0")
                items.append(encode_value(v, ctx.inputs_dir, "unused_", [0]))
                continue
            if not isinstance(v, torch.Tensor) or v.numel() * v.element_size() != place["nbytes"]:
                raise _devshare.DevShareError(f"input set {i} differs in size from set 0")
            off, n = place["offset"], place["nbytes"]
            buf.tensor[off:off + n].copy_(v.contiguous().reshape(-1).view(torch.uint8))
            items.append({"__tensor__": {"shared": slot, "offset": off, "dtype": tensor_name(v.dtype),
                                         "shape": list(v.shape)}})
        return items

    def _stage_set(self, h: ChildHandle, ctx: ProblemContext, msg: dict[str, Any]) -> None:
        """Answer a candidate process's ``need_set``: input set ``msg["set"]`` copied into the staging
        buffer (shared buffer 0), then ``set_ready`` with its items. The process copies the values out
        before it asks again, and nothing here ever reads the buffer back.

        Raises:
            TensorFormatError: no staging buffer, or a set index out of range (a protocol violation).
            ReferenceError_: the set differs in kind or size from set 0 (the problem's inputs vary), or
                drawing it again ran out of device memory (``oom``: the harness's failure).
        """
        i = msg.get("set")
        if not self._share_staged or not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < ctx.n_sets:
            raise TensorFormatError(f"request for input set {str(i)[:40]} without a staging buffer or out of range")
        self._stage_requests += 1
        if self._stage_requests > self.STAGE_MAX_REQUESTS_PER_SET * ctx.n_sets:
            # an honest process asks about a dozen times (trials, profile, ablation, timing, re-checks); a
            # flood would keep this side redrawing gigabytes, and its unread answers would fill the socket
            raise TensorFormatError(f"{self._stage_requests} requests for input sets")
        try:
            items = self._fill_set(ctx, i, self._share_bufs[0], 0)
        except _devshare.DevShareError as e:  # the problem's sets differ in shape: judged as the reference's
            raise ReferenceError_(f"input sets cannot be staged: {e}") from e
        except torch.OutOfMemoryError as e:
            # the trusted side drawing the set again ran out (beside this or another slot's candidate): the
            # harness's failure, not the candidate's oom
            raise ReferenceError_(f"out of memory while staging input set {i} for the candidate: {e}",
                                  oom=True) from e
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # in the buffer before the process reads it
            torch.cuda.empty_cache()  # the redrawn set, back for the candidate's process to use
        h.chan.send({"cmd": "set_ready", "set": i, "items": items})

    def _free_share(self, h: ChildHandle | None = None) -> None:
        """Free the shared buffers of the last candidate once nothing can map them: its process group is
        killed (a child it started in its group goes too) and its exit confirmed. Freeing memory another
        process still maps is undefined behaviour in CUDA, so buffers of a process whose end is not
        confirmed are kept aside (leaked, with a warning) instead."""
        bufs, self._share_bufs, self._share_out, self._share_staged = self._share_bufs, [], None, False
        if not bufs:
            return
        if h is not None:
            h.kill("finished")  # the whole group, whatever close() found
            if h.wait_exit(10.0) is None:
                log.warning("candidate process %s did not end: its %d shared buffers stay allocated", h.pid, len(bufs))
                self._share_quarantine.extend(bufs)
                return
        for b in bufs:
            b.free()

    def _child_job(self, job: EvalJob, ctx: ProblemContext, jobdir: Path,
                   shared: tuple[list[Any], dict[str, Any]] | None = None) -> dict[str, Any]:
        cand_path = jobdir / "candidate.py"
        cand_path.write_text(job.candidate.source, encoding="utf-8")
        for sub in ("home", "tmp", "build", "outputs"):
            (jobdir / sub).mkdir(exist_ok=True)
        self._job_triton_seeded = plant_seed(self._triton_seed, jobdir / "cache" / "triton")
        settings = _timing.TimerSettings.from_protocol(job.protocol, self.device)

        return {
            "mode": "eval",
            "job_dir": str(jobdir),
            "candidate_path": str(cand_path),
            "device": str(self.device),
            "protocol": job.protocol.to_dict(),
            "build_dir": str(jobdir / "build"),
            "build_cache": str(self.build_cache) if self.build_cache else None,
            "problem_namespace": job.protocol.name == "kernelbench",
            "timer": dataclasses.asdict(settings),
            "env": {},
            # after its hello the process waits for {"cmd": "build"} before any candidate code runs
            "build_cmd": True,
            # the process announces its Triton JIT compiles (host work) to the trusted side
            "compile_notice": self.compile_off_hold,
            **ctx.job_fields(shared[0] if shared else None),
            "share": shared[1] if shared else None,
        }

    #: the most bytes a candidate's outputs for one call may describe: this many times the reference's (a
    #: boolean reference output returned as float64 or int64 is 8 times its bytes, and may still be judged)
    OUT_LIMIT_FACTOR = 8
    #: ... or the reference's plus this much, whichever is more
    OUT_LIMIT_SLACK_BYTES = 256 << 20

    def _read_outputs(self, msg: dict[str, Any], jobdir: Path) -> list[Any]:
        """The candidate's outputs of one call, copied into this process (on the device): from files, the
        shared output buffer, or plain values.

        Outputs that describe more bytes than :attr:`OUT_LIMIT_FACTOR` times the reference's outputs (or
        the reference's plus :attr:`OUT_LIMIT_SLACK_BYTES`) are not copied: they cannot match the
        reference's shapes (the widest dtype is 8 bytes, the narrowest 1), and copying them could run the
        trusted side out of memory (a harness error). Each is then an :class:`OutputTooLarge`, which the
        comparison reports as a wrong output.

        Raises:
            TensorFormatError: a malformed output description (a protocol violation).
        """
        descs = msg.get("descs") or []
        limit = getattr(self, "_out_limit_bytes", None)  # (set per job; absent on a bare evaluator)
        if limit is not None and isinstance(descs, list):
            total = sum(_described_nbytes(d) for d in descs)
            if total > limit:
                for d in descs:  # the files it wrote go, and the buffer is poisoned, as after a read
                    name = str(d.get("file", "")) if isinstance(d, dict) else ""
                    if name and "/" not in name and not name.startswith("."):
                        (jobdir / "outputs" / name).unlink(missing_ok=True)
                if getattr(self, "_share_out", None) is not None:
                    self._share_out.poison()
                return [OutputTooLarge(total, limit) for _ in descs]
        outs: list[Any] = []
        for d in descs:
            if not isinstance(d, dict):
                raise TensorFormatError("bad output description")
            if "file" in d:
                # staged onto a GPU in chunks
                t = self._trusted_copy(lambda: read_tensor(d, jobdir / "outputs", device=self.device),
                                       "reading the candidate's output file")
                os.unlink(jobdir / "outputs" / d["file"])
                outs.append(t)
            elif "shared" in d:
                outs.append(self._shared_output(d))
            elif "value" in d:
                outs.append(d["value"])
            else:
                outs.append(object())  # unsupported output type: compare() reports it
        if self._share_out is not None:
            # copied out: the next message's outputs must be written anew, not found there
            self._share_out.poison()
        return outs

    def _shared_output(self, d: dict[str, Any]) -> torch.Tensor:
        """A copy, in this process's memory, of an output the candidate put in the shared output buffer.

        Raises:
            TensorFormatError: no shared buffer, or a description that does not fit inside it.
        """
        buf = self._share_out
        try:
            dtype = DTYPES[str(d["dtype"])]
            shape = [int(x) for x in d["shape"]]
            off = d["offset"]
        except (KeyError, TypeError, ValueError) as e:
            raise TensorFormatError(f"bad shared output description {d!r}: {e}") from None
        if buf is None:
            raise TensorFormatError("an output in a shared buffer, but none was shared")
        if not isinstance(off, int) or isinstance(off, bool) or off < 0 or off % _devshare.ALIGN or \
                len(shape) > 64 or any(x < 0 or x >= 1 << 48 for x in shape):
            raise TensorFormatError(f"bad shared output description {d!r}")
        n = nbytes_of(dtype, shape)
        if off + n > buf.nbytes:
            raise TensorFormatError(f"a shared output of {n} bytes at {off} overruns the buffer ({buf.nbytes} bytes)")
        try:
            view = buf.tensor[off:off + n].view(dtype).reshape(shape)
        except Exception as e:  # noqa: BLE001 - a shape torch refuses (too many elements, say)
            raise TensorFormatError(f"bad shared output description {d!r}: {e}") from None
        return self._trusted_copy(view.clone, "copying the candidate's output out of the shared buffer")

    def _trusted_copy(self, fn: Callable[[], Any], what: str) -> Any:
        """``fn()`` (an allocation on the trusted side for a well-formed request of the candidate's), tried
        once more with the allocator's cache handed back where the device is out of memory.

        Raises:
            ReferenceError_: out of device memory still (``oom``): the harness's failure (beside this or
                another slot's job), not a protocol violation or an oom of the candidate's (H200 session 12:
                a 6 GiB output copy refused beside five other slots was recorded as a ``cheat``).
        """
        for attempt in (0, 1):
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - torch.OutOfMemoryError, or the driver's AcceleratorError
                if not _device_oom(e):
                    raise
                if attempt or self.device.type != "cuda":
                    raise ReferenceError_(f"out of device memory {what}: {type(e).__name__}: {str(e)[:300]}",
                                          oom=True) from None
                torch.cuda.empty_cache()

    def _run_candidate(self, job: EvalJob, ctx: ProblemContext, jobdir: Path, findings: list[Finding],
                       phase: dict[str, float], *, alternate: list[str] | None = None,
                       measured: dict[str, TimingStats] | None = None, files_only: bool = False) -> EvalResult:
        """Run the candidate's process through build, correctness, profile, timing and rechecks.

        ``alternate``: baseline modes to time in this job, interleaved with the candidate's timing in
        ``job.protocol.alternate_rounds`` blocks each; their pooled stats go into ``measured``."""
        # each step's [name, start, end] (epoch s): which step a slot was in when another's window waited
        # (extra["steps"], read by scripts/window_drains.py; _finish closes it on every path)
        steps: list[list[Any]] = []
        last_at = [time.time()]
        self._timeline = (steps, last_at)

        def split(name: str) -> None:
            """A step of the timeline (``steps``) only, inside one of ``mark``'s: ``phase`` is unchanged."""
            now_at = time.time()
            steps.append([name, round(last_at[0], 3), round(now_at, 3)])
            last_at[0] = now_at

        if not self._triton_seed_tried:  # once, before this job's shared buffers take device memory
            self._triton_seed_tried = True
            self._triton_seed = make_seed(self.scratch / "triton-seed", self.child_env)
        try:
            shared = None if files_only else self._share_sets(ctx)
            childjob = self._child_job(job, ctx, jobdir, shared)
        except BaseException:
            self._free_share()
            self._timeline = None
            raise
        split("share_sets")  # the input sets drawn again and copied into the candidate's shared buffers
        timing_windows: list[dict[str, Any]] = []
        # what became of the checks that can be skipped: "judged", or why not (extra["integrity_checks"])
        checks: dict[str, Any] = {}
        env_note = {}
        h: ChildHandle | None = None
        compared: list[Comparison] = []
        launches = {"extension_calls": 0, "triton_launches": 0}
        stats: TimingStats | None = None
        tinfo: dict[str, Any] = {}
        profile: dict[str, Any] = {}
        build_info: dict[str, Any] = {}
        state = "start"
        last = [time.perf_counter()]

        def mark(name: str) -> None:
            """Trusted-side wall seconds of one step of the candidate's evaluation (``slot_*``)."""
            now, now_at = time.perf_counter(), time.time()
            phase[f"slot_{name}"] = phase.get(f"slot_{name}", 0.0) + (now - last[0])
            steps.append([name, round(last_at[0], 3), round(now_at, 3)])
            last[0], last_at[0] = now, now_at

        def add(msg: dict[str, Any]) -> None:
            for f in msg.get("findings") or []:
                try:
                    findings.append(Finding.from_dict(f))
                except (KeyError, ValueError, TypeError):
                    findings.append(Finding("runtime.protocol", Severity.CHEAT, "protocol",
                                            "malformed finding from the candidate process"))

        moved_s = [0.0]  # seconds the deadlines moved by mid-step yields (expect with host_step)
        # seconds the candidate's process spent stopped for other slots' windows in its build and construction
        stopped_s: dict[str, float] = {}

        def child_phase(step: str, raw: float) -> None:
            """``phase[step]`` from the candidate's process's own measure (``build``, ``construct``, its calls...),
            less the time it spent stopped mid-step in that step (that goes to ``phase["<step>_stopped"]``; it is
            also in ``yield_wait``): the step's own host work, comparable between runs with more or fewer
            windows."""
            stopped = stopped_s.get(step, 0.0)
            if stopped > 0:
                phase[f"{step}_stopped"] = stopped
            phase[step] = max(0.0, raw - stopped)

        def expect(deadline: float, *events: str, host_step: bool = False, notices: bool = False) -> dict[str, Any]:
            """The candidate's next message of one of ``events``. ``host_step``: the process is in a step of
            host work (build, construction) that a window queued meanwhile need not wait for: it is stopped
            mid-step and let go on after the window (:meth:`_gpu_yield`); ``deadline`` moves by the wait, and
            so does ``moved_s[0]``. ``notices``: the process's ``host_work`` announcements (a Triton compile
            inside a call, its device work synchronised first) make the stretch between ``on`` and ``off`` such
            a step too (only where the process is not inside its own timing window); elsewhere they are
            read and dropped."""
            assert h is not None
            announced = False
            lane_off = False  # (lane_priority) this lane job's bit is down for the host step: windows may queue
            while True:
                host_now = (host_step or announced) and self._gpu_share is not None
                if host_now != lane_off:
                    self._set_lane(not host_now)
                    lane_off = host_now
                if host_now:
                    try:
                        msg = h.chan.recv(timeout_s=min(self.MIDSTEP_POLL_S, max(0.0, deadline - time.monotonic())))
                    except ChannelTimeout:
                        if time.monotonic() >= deadline:
                            raise
                        waited = self._gpu_yield(h, phase, deadline, midstep=True)
                        deadline += waited
                        moved_s[0] += waited
                        continue
                else:
                    msg = h.chan.recv(timeout_s=max(0.0, deadline - time.monotonic()))
                add(msg)
                if msg.get("event") == "host_work":
                    if notices:
                        announced = msg.get("on") is True
                        if announced:
                            phase["host_work_notices"] = phase.get("host_work_notices", 0.0) + 1.0
                    continue
                if msg.get("event") == "need_set" and "need_set" not in events:
                    self._stage_set(h, ctx, msg)
                    continue
                if msg.get("event") == "error":
                    raise _ChildFailed(str(msg.get("kind", "runtime_error")), str(msg.get("error", ""))[:8000])
                if msg.get("event") in events:
                    if lane_off:
                        self._set_lane(True)
                    return msg

        if self.device.type == "cuda":
            # hand this process's cached, unused device memory back, for the candidate's process to use
            torch.cuda.empty_cache()
        try:
            if not self.start_off_hold:
                self._gpu_yield(None, phase)  # the reference and the shared sets are ready; no process yet
            # the process start (sandbox, imports, its CUDA context, the shared buffers mapped) runs no
            # candidate code and launches no kernel; with start_off_hold it runs with the hold given up (a
            # window queued meanwhile goes on beside it) and the hold is back before the build is asked for
            with self._host_stretch(phase) if self.start_off_hold else contextlib.nullcontext():
                h = self.launcher.start(childjob, self._sandbox_cfg(jobdir, job.timeout_s))
                h.watch_memory(self.memory_limit, folder=jobdir)
                mono0 = time.monotonic()
                hello = expect(mono0 + 120, "hello")
                hello_at = time.monotonic()
            mono0 += time.monotonic() - hello_at  # the wait for the hold is not the build's time
            env_note = hello.get("sandbox") or {}
            if shared and hello.get("share_error"):
                # the process could not map the buffers before any candidate code ran: the harness's
                # failure, not the candidate's; evaluate() runs it again with files
                h.kill("shared buffers not mapped")
                return self._finish(h, EvalResult(Outcome.RUNTIME_ERROR, compiled=False,
                                                  error=f"shared device buffers: {str(hello['share_error'])[:500]}",
                                                  findings=tuple(findings),
                                                  extra={"share_failed": True, "sandbox": env_note}), jobdir)
            mark("start")  # process start, sandbox, imports
            h.chan.send({"cmd": "build"})
            state = "build"  # the candidate's code runs from here on
            moved_s[0] = 0.0
            built = expect(mono0 + job.build_timeout_s, "built", host_step=True)
            stopped_s["build"] = moved_s[0]
            build_info = built.get("build") or {}
            child_phase("build", float((built.get("phase_s") or {}).get("build", 0.0)))
            if not built.get("ok"):
                kind = str(built.get("kind", "compile_error"))
                outcome = {"oom": Outcome.OOM, "runtime_error": Outcome.RUNTIME_ERROR}.get(kind, Outcome.COMPILE_ERROR)
                return self._finish(h, EvalResult(outcome, compiled=False, error=str(built.get("error", ""))[:8000],
                                                  findings=tuple(findings),
                                                  extra={"sandbox": env_note, "build": build_info}), jobdir)
            state = "run"
            run_deadline = time.monotonic() + job.timeout_s
            # between the steps below the candidate's process waits for the next command and does no GPU
            # work: a timing window another slot queued on this device is let in there (_gpu_yield)
            run_deadline += self._gpu_yield(h, phase, run_deadline)
            h.chan.send({"cmd": "construct"})
            moved_s[0] = 0.0
            constructed = expect(run_deadline, "constructed", host_step=True)
            run_deadline += moved_s[0]
            stopped_s["construct"] = moved_s[0]
            weights = constructed.get("weights") or {}
            mark("build_construct")
            run_deadline += self._gpu_yield(h, phase, run_deadline)
            h.chan.send({"cmd": "next"})
            ok = True
            notices = self.compile_off_hold
            for i in range(ctx.n_correct):
                moved_s[0] = 0.0
                msg = expect(run_deadline, "output", notices=notices)
                # stopped inside the call for other slots' windows while it compiled (announced host work)
                run_deadline += moved_s[0]
                if moved_s[0] > 0:
                    for k in ("trial_call", "jit_compile") + (("trial_call_first",) if i == 0 else ()):
                        stopped_s[k] = stopped_s.get(k, 0.0) + moved_s[0]
                if i == 0:
                    # the candidate's first call (a Triton kernel's JIT compile in its fresh process: host work,
                    # announced to let a queued window in, see compile_off_hold_enabled) apart from the rest of
                    # the correctness step
                    split("first_call")
                for k in launches:
                    launches[k] += int((msg.get("launches") or {}).get(k, 0))
                t_cmp = time.perf_counter()
                cmp = ctx.compare(self._read_outputs(msg, jobdir), i)
                self._hand_back_judging(ctx)
                phase["compare"] = phase.get("compare", 0.0) + time.perf_counter() - t_cmp
                compared.append(cmp)
                if not cmp.ok:
                    ok = False
                    h.chan.send({"cmd": "stop"})
                    break
                run_deadline += self._gpu_yield(h, phase, run_deadline)
                h.chan.send({"cmd": "next"} if i + 1 < ctx.n_correct else {"cmd": "continue"})
            if ok:  # the process's precision watch (one more call) is done; it waits from here on
                moved_s[0] = 0.0
                expect(run_deadline, "watched", notices=notices)
                run_deadline += moved_s[0]
                if moved_s[0] > 0:
                    stopped_s["jit_compile"] = stopped_s.get("jit_compile", 0.0) + moved_s[0]
            static_cheat = any(f.severity is Severity.CHEAT for f in findings)
            mark("correctness")  # candidate calls and trusted-side comparisons
            if ok and not static_cheat and job.protocol.ablate_kernels:
                run_deadline += self._gpu_yield(h, phase, run_deadline)
                self._ablate(h, ctx, jobdir, findings, expect, run_deadline, checks)
                self._hand_back_judging(ctx)
                mark("ablation")
            # the profiled call (kernel share, streams, launch witness) runs with the device to itself, inside the
            # candidate's first timing window, or a window of its own where nothing is timed: under the shared
            # hold, other slots' untimed work ran beside it and stretched its kernels (H200 session 28: one copy
            # kernel 0.25 ms in one sweep, 6.3 ms in the next; 11 of 248 share verdicts flipped between them)
            profile_due = ok and self._profiles_calls()

            def take_profile(waited_since: float) -> None:
                """The profiled call, inside a window entered after waiting since ``waited_since``
                (``time.monotonic()``): that wait is not the candidate's time."""
                nonlocal run_deadline, profile, profile_due
                run_deadline += time.monotonic() - waited_since
                profile_due = False
                h.chan.send({"cmd": "profile", "set": 0})
                profile = expect(run_deadline, "profile").get("profile") or {}
                mark("profile")
                failed = profiled_call_failure(profile)
                if failed is not None:
                    raise _ChildFailed(*failed)

            if profile_due and static_cheat:  # nothing is timed: a window for the profiled call alone
                t_wait = time.monotonic()
                with self.timing_window("profile", h.pid) as window, _ended_in_window(h):
                    window["profiled"] = True
                    take_profile(t_wait)
                timing_windows.append(window)
            if ok and not static_cheat:
                state = "time"
                if self.device.type == "cuda":
                    # the comparisons' temporaries (copies of multi-GB outputs among them) leave this
                    # process's allocator cache full while the candidate's timing needs its inputs twice
                    # over (L1/19 on an H200: 32 GiB cached here, the candidate out of memory)
                    torch.cuda.empty_cache()
                rounds = max(1, int(job.protocol.alternate_rounds)) if alternate else 1
                full = _timing.TimerSettings.from_protocol(job.protocol, self.device)
                fns: dict[str, tuple[Callable[[int], Any], float]] = {}
                if rounds > 1:
                    t0 = time.perf_counter()
                    fns = self._prepare_baselines(ctx, job.protocol, list(alternate or []))
                    phase["baselines"] = phase.get("baselines", 0.0) + time.perf_counter() - t0
                    mark("baseline_compile")
                part = block_settings(full, rounds)
                cand_part, hiding = part, None
                cand_blocks: list[tuple[TimingStats, dict[str, Any]]] = []
                base_blocks: dict[str, list[tuple[TimingStats, dict[str, Any]]]] = {}
                for _r in range(rounds):
                    t_wait = time.monotonic()
                    with self.timing_window("candidate", h.pid) as window, _ended_in_window(h):
                        if _r == 0:
                            if profile_due:  # the profiled call first, in the same hold of the device
                                window["profiled"] = True
                                take_profile(t_wait)
                            cand_part, hiding = launch_hiding_for(
                                part, profile, self._spin_cycles_per_ms() if part.hide_launch else None)
                        h.chan.send({"cmd": "time", "timer": dataclasses.asdict(cand_part)}
                                    if rounds > 1 or cand_part is not part else {"cmd": "time"})
                        # from when the window got the device: waiting for the lock is not the candidate's time
                        tm = expect(max(run_deadline, time.monotonic()) + job.timeout_s, "timing")
                    timing_windows.append(window)
                    reported, tm_info = TimingStats.from_dict(tm.get("stats")), tm.get("info") or {}
                    if reported is not None:  # the summary is the trusted side's, from the raw samples
                        derived = _timing.stats_from_samples(reported, tm_info, cand_part)
                        forged = _timing.stats_forged(reported, derived)
                        if forged:
                            findings.append(Finding(
                                "runtime.timer-tamper", Severity.CHEAT, "timer-tamper",
                                "the candidate's process reported a timing summary that its own samples do not "
                                f"give ({', '.join(forged)}: reported median {reported.median_ms:.6g} ms, from the "
                                f"samples {derived.median_ms:.6g} ms)", {"fields": forged}))
                        reported = derived
                    cand_blocks.append((reported, tm_info))
                    if job.protocol.recheck_after_timing and tm.get("timed"):
                        self._check_timed_output(ctx, tm["timed"], jobdir, findings, checks)
                        self._hand_back_judging(ctx)
                    if rounds > 1:
                        t0 = time.perf_counter()
                        with _stopped(h, self.sandbox_on):  # nothing of the candidate runs meanwhile
                            for mode, (fn, _c) in fns.items():
                                self._time_baseline_block(ctx, mode, fn, part, base_blocks)
                        phase["baselines"] = phase.get("baselines", 0.0) + time.perf_counter() - t0
                stats, tinfo = pool_blocks(cand_blocks, part)
                tinfo.pop("windows", None)
                if hiding:
                    tinfo["launch_hiding"] = hiding
                if rounds > 1 and measured is not None:
                    measured.update(self._finish_baselines(ctx, list(alternate or []), fns, base_blocks, part))
                # waiting for the device's timing lock (the first window's is in "profile" where a call is profiled),
                # and alternated baselines
                mark("timing")
                def recheck(set_idx: int, inplace: bool) -> Comparison:
                    nonlocal run_deadline
                    if self.device.type == "cuda":
                        torch.cuda.empty_cache()
                    run_deadline += self._gpu_yield(h, phase, run_deadline)
                    h.chan.send({"cmd": "recheck", "set": set_idx, "inplace": inplace})
                    msg = expect(run_deadline + job.timeout_s, "output")
                    return ctx.compare(self._read_outputs(msg, jobdir), set_idx)

                if job.protocol.recheck_after_timing:
                    state = "recheck"
                    _record_recheck(findings, recheck(ctx.recheck_set, True), "runtime.replay", Severity.TIMING,
                                    "replay", "wrong output on fresh values written into the buffers used during "
                                    "timing", "the re-check on fresh values after timing")
                if job.protocol.both_orders:
                    _record_recheck(findings, recheck(0, False), "runtime.history", Severity.CHEAT, "history",
                                    "output for input set 0 differs when computed again after other calls",
                                    "input set 0 computed again after timing")
            mark("recheck")
            h.chan.send({"cmd": "finish"})
            done = expect(time.monotonic() + 60, "done")
            mark("finish")
            build_info = done.get("build") or build_info
            for k, v in (done.get("phase_s") or {}).items():
                # the process's own steps only (CHILD_PHASES): the trusted side's figures (yield_wait, reference,
                # slot_*...) are not the candidate's to send, and build came netted with "built"
                if k in self.CHILD_PHASES and isinstance(v, (int, float)) and not isinstance(v, bool):
                    child_phase(k, float(v))
            res = self._verdict(job, ctx, compared, ok, findings, stats, tinfo, launches, profile, build_info, checks)
            extra = dict(res.extra)
            extra.update({"sandbox": env_note, "build": build_info, "weights": weights, "launches": launches,
                          "input_exchange": ("staged" if shared[1].get("staged") else "shared") if shared else "files",
                          "memory_share": round(self._job_share, 4), "memory_claim": round(self._job_claim, 4),
                          "timing_sets": len(ctx.timing_sets),
                          "profile": profile, "timing_info": {k: v for k, v in tinfo.items() if k != "synced_ms"},
                          "timing_windows": timing_windows, "steps": steps, "integrity_checks": checks,
                          "triton_cache_seeded": self._job_triton_seeded,
                          "peak_rss_bytes": h.peak_rss_bytes,
                          "candidate_device_peak_bytes": done.get("device_peak_bytes")
                          if isinstance(done.get("device_peak_bytes"), int) else None})
            return self._finish(h, res.with_(extra=extra), jobdir)
        except ReferenceError_ as e:
            # the trusted side failed judging (a lazy reference evaluated at comparison): as when the
            # reference fails at set-up, a runtime error marked as the reference's, with the candidate's
            # process ended here
            # what the device held when the trusted side ran out, read while the candidate's process is alive
            mem = {"trusted_memory": self._trusted_memory()} if e.oom and self.device.type == "cuda" else {}
            if h is not None:
                h.kill("reference failed")
            # out of device memory on the trusted side (beside this or another slot's candidate): the
            # harness's failure, marked so (harness_error), not the candidate's oom; evaluate() runs it again
            # with the device claimed (_alone_verdict)
            return self._finish(h, EvalResult(Outcome.RUNTIME_ERROR, compiled=state not in ("start", "build"),
                                              error=f"reference failed: {e}", findings=tuple(findings),
                                              extra={"reference_error": True, "phase": state,
                                                     **({"harness_error": True, "trusted_oom": True, **mem}
                                                        if e.oom else {}),
                                                     "sandbox": env_note}), jobdir)
        except _ChildFailed as e:
            outcome = Outcome.OOM if e.kind == "oom" else Outcome.RUNTIME_ERROR
            return self._finish(h, EvalResult(outcome, compiled=state != "build", error=e.text,
                                              findings=tuple(findings), extra={"sandbox": env_note, "phase": state,
                                                                               "build": build_info}), jobdir)
        except ChannelTimeout:
            if h is not None:
                h.kill("timeout")
            limit = job.build_timeout_s if state in ("start", "build") else job.timeout_s
            return self._finish(h, EvalResult(Outcome.TIMEOUT, compiled=state not in ("start", "build"),
                                              error=f"no answer within {limit:.0f} s while in phase '{state}'",
                                              findings=tuple(findings), extra={"phase": state, "sandbox": env_note}),
                                jobdir)
        except (ChannelClosed, ChannelError, TensorFormatError, OSError) as e:
            code = h.wait_exit(10.0) if h is not None else None
            reason = h.killed_reason if h is not None else ""
            log_tail = _log_tail(jobdir)
            if reason.startswith("resident memory"):
                outcome, err = Outcome.OOM, reason
            elif isinstance(e, (TensorFormatError,)) or (isinstance(e, ChannelError) and not isinstance(e, ChannelClosed)):
                outcome, err = Outcome.RUNTIME_ERROR, f"protocol violation: {e}"
                findings.append(Finding("runtime.protocol", Severity.CHEAT, "protocol", str(e)))
            else:
                sig = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
                outcome, err = Outcome.RUNTIME_ERROR, f"candidate process {sig} in phase '{state}'\n{log_tail}"
                if "out of memory" in log_tail.lower():
                    outcome = Outcome.OOM
                if state == "build" and outcome is Outcome.RUNTIME_ERROR:
                    outcome = Outcome.COMPILE_ERROR
            if any(f.tag == "protocol" for f in findings):
                outcome = Outcome.CHEAT
            return self._finish(h, EvalResult(outcome, compiled=state not in ("start", "build"), error=err[:8000],
                                              tag="protocol" if outcome is Outcome.CHEAT else "",
                                              findings=tuple(findings), extra={"phase": state, "sandbox": env_note}),
                                jobdir)
        except BaseException:
            if h is not None:  # a harness error: no candidate process outlives it
                h.kill("harness error")
                h.close()
            self._free_share(h)
            raise

    ABLATION_ROUND = (1 << 20) + 7  # a refresh round for the kernel-ablation call (see timing.refresh_values)

    def _hand_back_judging(self, ctx: ProblemContext) -> None:
        """After a comparison in a large job (:attr:`ProblemContext.large`), once its copy of the candidate's
        output is gone: this process's cached device memory goes back to the driver before the candidate's
        process computes again (their turns, :meth:`work_nbytes`)."""
        if self.device.type == "cuda" and ctx.large:
            torch.cuda.empty_cache()

    def _ablate(self, h: ChildHandle, ctx: ProblemContext, jobdir: Path, findings: list[Finding],
                expect: Callable[..., dict[str, Any]], deadline: float, checks: dict[str, Any] | None = None) -> None:
        """The kernel-ablation check (protocol ``ablate_kernels``): the candidate's output with every Triton
        launch skipped, on input set 0 refreshed for :data:`ABLATION_ROUND`, judged against the reference
        on the same values; correct means the kernels do not contribute (``cheat(kernel-not-executed)``).
        ``checks["kernel_ablation"]`` gets ``"judged"`` or why it was not (the candidate's process skipped
        it, or the trusted side could not judge it, e.g. out of device memory).

        Raises:
            TensorFormatError: a malformed output description (a protocol violation, as elsewhere).
        """
        checks = {} if checks is None else checks
        h.chan.send({"cmd": "ablate", "set": 0, "round": self.ABLATION_ROUND})
        msg = expect(deadline, "ablation")
        if msg.get("skipped") or not msg.get("descs"):
            checks["kernel_ablation"] = f"skipped: {str(msg.get('skipped') or 'no output')[:200]}"
            return
        outs = self._read_outputs(msg, jobdir)
        try:
            cmp = ctx.compare_on(0, self.ABLATION_ROUND, outs)
        except ReferenceError_ as e:  # the trusted side could not judge it: no finding either way
            log.warning("%s: kernel-ablation check skipped: %s", ctx.problem.key, e)
            checks["kernel_ablation"] = _not_judged(e)
            return
        checks["kernel_ablation"] = "judged"
        if cmp.ok:
            findings.append(Finding(
                "runtime.kernel-ablation", Severity.CHEAT, "kernel-not-executed",
                f"with all {int(msg.get('launches_skipped') or 0)} Triton launch(es) of a call skipped, the output "
                "is still correct on values no call had seen: the custom kernels do not contribute to it"))

    def _check_timed_output(self, ctx: ProblemContext, timed: dict[str, Any], jobdir: Path,
                            findings: list[Finding], checks: dict[str, Any] | None = None) -> None:
        """Judge the output of the block's last timed call against the reference on the very inputs of
        that call (input set ``timed["set"]`` as refreshed for round ``timed["round"]``): a result served
        from a cache keyed on approximate contents is stale there (EXPLOITS K-16). ``checks["timed_output"]``
        gets ``"judged"`` or why it was not (the trusted side failing, e.g. out of device memory); over
        several timing blocks, a block not judged is kept over later ones that were."""
        checks = {} if checks is None else checks
        try:
            set_idx = int(timed.get("set", 0))
            round_ = timed.get("round")
            if not 0 <= set_idx < ctx.n_sets:
                raise TensorFormatError(f"timed output for unknown input set {set_idx}")
            if round_ is not None and (not isinstance(round_, int) or isinstance(round_, bool) or round_ < 0):
                raise TensorFormatError(f"timed output for a bad refresh round {round_!r}")
            outs = self._read_outputs(timed, jobdir)
            cmp = ctx.compare_on(set_idx, round_, outs)
        except TensorFormatError as e:
            findings.append(Finding("runtime.protocol", Severity.CHEAT, "protocol", f"timed output: {e}"))
            checks["timed_output"] = "protocol violation"
            return
        except Exception as e:  # the reference failing here is not the candidate's doing
            log.warning("%s: timed-output check skipped: %s", ctx.problem.key, e)
            checks["timed_output"] = _not_judged(e)
            return
        checks.setdefault("timed_output", "judged")
        if cmp.ok:
            return
        # a cached result matches the set as the candidate first saw it (before any refresh) better
        # than the inputs of the timed call; rounding at the edge of the bound does not
        try:
            stale = ctx.compare(outs, set_idx) if round_ is not None else None
        except Exception:  # noqa: BLE001 - no second opinion: judge on the first alone
            stale = None
        _record_recheck(findings, cmp, "runtime.replay", Severity.TIMING, "replay",
                        "the output of a timed call is wrong for the inputs of that call (a cached or stale "
                        "result was timed)", "the output of the last timed call", stale=stale)

    def _finish(self, h: ChildHandle | None, res: EvalResult, jobdir: Path) -> EvalResult:
        if self._timeline is not None:
            steps, last_at = self._timeline
            self._timeline = None
            if "steps" not in res.extra:  # a path that ended early: its steps so far, and the rest until now
                res = res.with_(extra={**res.extra, "steps": steps + [["ended", round(last_at[0], 3),
                                                                          round(time.time(), 3)]]})
        if res.outcome is Outcome.OOM and self.device.type == "cuda":
            # what this (trusted) process held when the candidate ran out of memory, read before the
            # candidate's process is closed (device_free_bytes counts what it still holds): tells a
            # candidate's own OOM from one the harness caused
            res = res.with_(extra={**res.extra, "trusted_memory": self._trusted_memory()})
        if h is not None:
            h.close()
        self._free_share(h)
        if not res.log:
            n = 6000 if res.outcome in (Outcome.RUNTIME_ERROR, Outcome.COMPILE_ERROR, Outcome.OOM) else 2000
            res = res.with_(log=_log_tail(jobdir, n))
        return res

    def _trusted_memory(self) -> dict[str, Any]:
        """This process's device memory (CUDA only), in bytes: ``reserved`` and ``allocated`` by its
        caching allocator, and the device's ``free`` and ``total`` (``torch.cuda.mem_get_info``, every
        process's use counted); ``{"error": ...}`` when they cannot be read."""
        try:
            free_bytes, total_bytes = torch.cuda.mem_get_info(self.device)
            return {"reserved_bytes": int(torch.cuda.memory_reserved(self.device)),
                    "allocated_bytes": int(torch.cuda.memory_allocated(self.device)),
                    "device_free_bytes": int(free_bytes), "device_total_bytes": int(total_bytes)}
        except Exception as e:  # noqa: BLE001 - bookkeeping must not change the verdict
            return {"error": f"{type(e).__name__}: {e}"[:300]}

    def _verdict(self, job: EvalJob, ctx: ProblemContext, compared: list[Comparison], ok: bool,
                 findings: list[Finding], stats: TimingStats | None, tinfo: dict[str, Any],
                 launches: dict[str, int], profile: dict[str, Any], build_info: dict[str, Any],
                 checks: dict[str, Any]) -> EvalResult:
        """The result of a candidate whose process ran to its end. ``checks``: the result's
        ``extra["integrity_checks"]``, which gets ``kernel_share`` here (:meth:`_kernel_share`)."""
        p = job.protocol
        worst_abs = max((c.max_abs_err for c in compared if c.max_abs_err is not None), default=None)
        worst_rel = max((c.max_rel_err for c in compared if c.max_rel_err is not None), default=None)
        kb = all(c.allclose_kernelbench for c in compared if c.allclose_kernelbench is not None) if compared else None
        failed = next((c for c in compared if not c.ok), None)
        common = dict(compiled=True, max_abs_err=worst_abs, max_rel_err=worst_rel, allclose_kernelbench=kb)
        extra: dict[str, Any] = {"trials": [{"ok": c.ok, "max_abs_err": c.max_abs_err, "max_rel_err": c.max_rel_err,
                                             "bound": c.bound, "ref_err": c.ref_err, "detail": c.detail}
                                            for c in compared]}
        # did a custom kernel run on the tested path?
        kernel_names = set(build_info.get("kernel_names") or [])
        prof_kernels = set((profile.get("kernels") or {}).keys())
        if kernel_names and prof_kernels:
            # on a GPU the profiler is the witness: a call into an extension counts only if one of the
            # extension's own __global__ kernels shows up among the launched kernels
            custom = launches.get("triton_launches", 0) + sum(
                1 for k in prof_kernels if any(n in k for n in kernel_names))
        else:
            custom = launches.get("extension_calls", 0) + launches.get("triton_launches", 0)
        if ok and custom == 0 and job.candidate.source.strip():
            # no kernel at all, the reference itself, or a PyTorch fallback: no-custom-kernel (K-19);
            # a kernel that exists but never ran on this path: kernel-not-executed (K-20)
            fallback = any(f.check in ("static.fallback", "static.no-kernel", "static.reference-use")
                           for f in findings)
            findings.append(Finding("runtime.kernel-launch", Severity.CHEAT,
                                    "no-custom-kernel" if fallback else "kernel-not-executed",
                                    "no custom kernel was launched during the correctness trials",
                                    {"launches": launches, "profiled_kernels": sorted(prof_kernels)[:20]}))
        # side-stream / escaped work: synced host time far above the event time
        synced = tinfo.get("synced_ms") or []
        if stats is not None and synced and stats.timer == "cuda_events":
            import statistics as st

            sm = st.median(synced)
            if sm > 1.5 * stats.median_ms + 0.05:
                findings.append(Finding("runtime.side-stream", Severity.TIMING, "side-stream",
                                        f"device work outlives the timed region: median {stats.median_ms:.4f} ms by "
                                        f"events on the current stream, {sm:.4f} ms until the device is idle",
                                        {"event_median_ms": stats.median_ms, "synced_median_ms": sm}))
        cheats = cheat_findings(findings)
        if cheats:
            return EvalResult(Outcome.CHEAT, tag=cheats[0].tag, correct=ok, candidate=stats,
                              findings=tuple(findings), extra=extra, **common)
        precision_marks = [f for f in findings if f.severity is Severity.POLICY and f.tag == "precision"]
        if p.precision != "fp32":
            precision_marks = []
        if not ok:
            assert failed is not None
            if precision_marks and lower_precision_bound_ok(failed):
                extra["policy_allowed"] = p.allow_lower_precision
                return EvalResult(Outcome.POLICY, tag="precision", correct=False, candidate=stats,
                                  findings=tuple(findings), error=failed.detail, extra=extra, **common)
            return EvalResult(Outcome.INCORRECT, correct=False,
                              error=(failed.detail or failed.reason) + _host_build_hint(extra.get("weights"), p),
                              findings=tuple(findings), extra=extra, **common)
        share = self._kernel_share(job, profile, checks, extra)
        timing_bad = [f for f in findings if f.severity is Severity.TIMING]
        if timing_bad:
            return EvalResult(Outcome.TIMING_INVALID, tag=timing_bad[0].tag, correct=True, candidate=stats,
                              findings=tuple(findings), extra=extra, **common)
        if share is not None and share < p.min_custom_kernel_share:
            # the candidate's own kernels did almost none of the work: PyTorch did (decided before the
            # precision tag: a lower-precision PyTorch computation is still PyTorch's)
            findings.append(Finding("runtime.kernel-share", Severity.POLICY, "torch-work",
                                    f"the candidate's own kernels took {share:.2%} of the profiled call's device "
                                    f"time, below the protocol's minimum of {p.min_custom_kernel_share:.2%}",
                                    dict(extra.get("custom_kernel_share_detail") or {}, share=share)))
            extra["policy_allowed"] = False
            return EvalResult(Outcome.POLICY, tag="torch-work", correct=True, candidate=stats,
                              findings=tuple(findings), extra=extra, **common)
        if precision_marks:
            extra["policy_allowed"] = p.allow_lower_precision
            return EvalResult(Outcome.POLICY, tag="precision", correct=True, candidate=stats,
                              findings=tuple(findings), extra=extra, **common)
        return EvalResult(Outcome.CORRECT, correct=True, candidate=stats, findings=tuple(findings), extra=extra,
                          **common)


    def _kernel_share(self, job: EvalJob, profile: dict[str, Any], checks: dict[str, Any],
                      extra: dict[str, Any]) -> float | None:
        """The share of the profiled call's device time that the candidate's own kernels took
        (:func:`.kernelshare.custom_kernel_share`, own kernels named by the candidate's source, device times
        from the profile's ``kernel_us``), recorded in ``extra["custom_kernel_share"]`` (rounded to 1e-6)
        with its evidence in ``extra["custom_kernel_share_detail"]``, and ``checks["kernel_share"]``:
        ``judged``, or ``not judged: ...`` when the profile failed or had no device time (then None is
        returned and the verdict is left as it is). Nothing is recorded without a profile on a CPU device
        (no CUDA profiler there)."""
        if not profile:
            if self.device.type == "cuda":
                checks["kernel_share"] = "not judged: no profile of the candidate's call"
            return None
        if profile.get("error"):
            checks["kernel_share"] = f"not judged: the profiler failed: {str(profile['error'])[:200]}"
            return None
        kernel_us = profile.get("kernel_us")
        if not isinstance(kernel_us, dict):
            checks["kernel_share"] = "not judged: the profile has no kernel times"
            return None
        share, detail = custom_kernel_share(kernel_us, own_kernel_names(job.candidate.source),
                                            namespaces=own_namespaces(job.candidate.source))
        extra["custom_kernel_share_detail"] = detail
        if share is None:
            checks["kernel_share"] = "not judged: no device time was profiled"
            return None
        extra["custom_kernel_share"] = round(share, 6)
        checks["kernel_share"] = "judged"
        return share


class _ChildFailed(Exception):
    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind = kind
        self.text = text


def _record_recheck(findings: list[Finding], cmp: Comparison, check: str, severity: Severity, tag: str,
                    message: str, where: str, *, stale: Comparison | None = None) -> None:
    """Record a re-check after timing (:func:`extra_check_verdict`): a stale result is the finding
    ``check``/``tag`` at ``severity``; a miss that rounding explains is a ``precision-margin`` warning
    (shown in reports; the verdict rests on the correctness trials)."""
    verdict = extra_check_verdict(cmp, stale=stale)
    if verdict == "stale":
        findings.append(Finding(check, severity, tag, f"{message}: {cmp.detail}", {"reason": cmp.reason}))
    elif verdict == "margin":
        findings.append(Finding("runtime.precision-margin", Severity.WARN, "precision-margin",
                                f"{where} crossed the correctness bound by a rounding-sized margin (not a stale "
                                f"result; the correctness trials passed): {cmp.detail}",
                                {"reason": cmp.reason, "max_abs_err": cmp.max_abs_err, "bound": cmp.bound}))


def profiled_call_failure(profile: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(kind, error)`` when the candidate's profiled forward call raised (the worker's ``call_error``, with
    ``oom`` when it ran out of memory), else None. That call passed every correctness trial before, so a
    failure there is the candidate's (one that reads the profiler's state and raises to leave the kernel share
    unjudged, README's attack C), not a profiler failure (``error``), which leaves the share unjudged.
    ``kind``: ``"oom"`` or ``"runtime_error"``."""
    err = profile.get("call_error")
    if not err:
        return None
    return ("oom" if profile.get("oom") is True else "runtime_error", f"the profiled call raised: {str(err)[:2000]}")


def _host_cpu_times() -> tuple[int, int] | None:
    """(idle + iowait, total) jiffies over all CPUs from ``/proc/stat`` (None where it is missing)."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:9]]
        return vals[3] + vals[4], sum(vals)
    except (OSError, ValueError, IndexError):
        return None


def _log_tail(jobdir: Path, n: int = 4000) -> str:
    try:
        data = (jobdir / "child.log").read_bytes()[-n:]
        return data.decode("utf-8", "replace")
    except OSError:
        return ""


def _wait_stopped(pid: int, timeout_s: float = 0.5) -> bool:
    """Wait until ``pid`` is stopped (``/proc/<pid>/stat`` state ``T``): a signal is delivered
    asynchronously, and the process runs on until then. False when it is not stopped by ``timeout_s``
    (or /proc cannot tell)."""
    end = time.monotonic() + timeout_s
    while True:
        fields = proc_stat(pid)
        if not fields:
            return False
        if fields[0] in ("T", "t", "Z", "X"):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.0005)


@contextlib.contextmanager
def _stopped(h: ChildHandle | None, own_group: bool) -> Iterator[None]:
    """SIGSTOP the candidate's process (its whole process group when sandboxed: it leads one) for the
    duration, SIGCONT after: no thread of it can run while the trusted side times the baselines."""
    def stop(sig: int) -> None:
        assert h is not None
        if own_group:
            try:
                os.killpg(h.pid, sig)
                return
            except OSError:  # not a group leader after all (no setsid): the process alone
                pass
        os.kill(h.pid, sig)

    stopped = False
    try:
        if h is not None:
            try:
                stop(signal.SIGSTOP)
                stopped = True
            except OSError:
                pass
            else:
                _wait_stopped(h.pid)
        yield
    finally:
        if stopped:
            try:
                stop(signal.SIGCONT)
            except OSError:
                pass


@contextlib.contextmanager
def _ended_in_window(h: ChildHandle) -> Iterator[None]:
    """Inside a timing window: a candidate's process that runs out of time there (a hung profiled or timed
    call, a spinning kernel among its work), or whose profiled call raised (:func:`profiled_call_failure`:
    the kernels it launched before raising may still run), is killed, and its end waited for, before the window
    gives the device up. Left to the caller's handler, it ran on beside the windows queued meanwhile:
    :meth:`DeviceEvaluator.timing_window` takes the slot's shared hold back only once those are done, and the
    handler runs after that."""
    try:
        yield
    except (ChannelTimeout, _ChildFailed) as e:
        h.kill("timeout" if isinstance(e, ChannelTimeout) else "its call failed inside a timing window")
        h.wait_exit(10.0)
        raise


def pool_blocks(blocks: list[tuple[TimingStats, dict[str, Any]]],
                settings: _timing.TimerSettings) -> tuple[TimingStats, dict[str, Any]]:
    """Pool timed blocks of one callable (``alternate_rounds``) into one summary over every sample.

    Returns:
        ``(stats, info)``: stats over the concatenated raw samples (ms); ``info`` with ``synced_ms``
        concatenated, ``elapsed_s`` summed, ``stopped`` (the only block's reason, or
        ``alternated:<n>``), ``blocks`` (each block's ``n`` and reason), ``window`` (the first block's)
        and ``windows`` (every block's), where recorded, and the host-pacing counts (:data:`HOST_PACING_COUNTS`)
        summed over the blocks that recorded them, with ``launch_host_share`` the median of the blocks' (until
        session 29 these were dropped, so an alternated timing could never be flagged host-bound).
    """
    if len(blocks) == 1:
        stats, info = blocks[0]
        if "window" in info:
            info = {**info, "windows": [info["window"]]}
        return stats, info
    samples: list[float] = []
    synced: list[float] = []
    by_placement: list[list[float]] = []
    for st, inf in blocks:
        samples += list(st.samples_ms)
        synced += list(inf.get("synced_ms") or [])
        # each block's placements, as taken
        by_placement += _timing.split_placements(st.samples_ms, inf.get("placement_n") or [len(st.samples_ms)])
    first = blocks[0][0]
    if any(inf.get("placement_n") for _, inf in blocks):  # every block's placements pooled alike
        stats = _timing.pool_placement_samples(by_placement, settings, first.timer)
    else:
        stats = _timing.summarize_samples(samples, timer=first.timer, statistic=first.statistic,
                                          round_to=settings.round_sig)
    info: dict[str, Any] = {"synced_ms": synced, "elapsed_s": sum(float(i.get("elapsed_s", 0.0)) for _, i in blocks),
                            "stopped": f"alternated:{len(blocks)}",
                            "blocks": [{"n": st.n, "stopped": i.get("stopped")} for st, i in blocks]}
    if "l2_flush_bytes" in blocks[0][1]:
        info["l2_flush_bytes"] = blocks[0][1]["l2_flush_bytes"]
    windows = [i["window"] for _, i in blocks if "window" in i]
    if windows:
        info["window"], info["windows"] = windows[0], windows
    for key in HOST_PACING_COUNTS:
        counts = [i[key] for _, i in blocks if isinstance(i.get(key), int)]
        if counts:
            info[key] = sum(counts)
    shares = [i["launch_host_share"] for _, i in blocks if isinstance(i.get("launch_host_share"), (int, float))]
    if shares:
        info["launch_host_share"] = statistics.median(shares)
    return stats, info


#: the timing info's per-trial counts of launch hiding and host pacing (:mod:`.timing`), summed when blocks pool
HOST_PACING_COUNTS = ("launch_hidden_trials", "launch_host_bound", "launch_exposed", "launch_unhidden_trials",
                      "launch_unhidden_host_bound")


def host_bound_callables(candidate_info: Mapping[str, Any] | None,
                         baseline_info: Mapping[str, Any]) -> list[str]:
    """The callables (``"candidate"``, and baseline modes such as ``"eager"``) whose time the host set: in more
    than half of their trials, with launch hiding on, the host's time to issue the call exceeded the GPU's
    (``launch_host_bound`` of ``launch_hidden_trials`` in their timing info), and, timed without hiding, the
    host's issue time was at least 90% of the event time (``launch_unhidden_host_bound`` of
    ``launch_unhidden_trials``; see :class:`.timing._HostPacing`). On an H200 such times differed by up to 60%
    between two runs (L1/12's candidate, torch.compile of L1/3-5) while GPU-bound ones repeated to a median
    0.1% (``docs/gpu/2026-12-01-s8``). Between two six-slot sweeps (session 29) the rows with no host-bound
    time repeated to a p95 of 0.49%; the candidates timed without hiding, which the unhidden count did not yet
    cover, moved by up to 53%.

    Args:
        candidate_info: the candidate's timing info (None: not timed).
        baseline_info: timing info by baseline mode (None or missing entries: not measured here).
    """
    def bound(info: Any) -> bool:
        if not isinstance(info, Mapping):
            return False
        for trials_key, bound_key in (("launch_hidden_trials", "launch_host_bound"),
                                      ("launch_unhidden_trials", "launch_unhidden_host_bound")):
            trials, host = info.get(trials_key), info.get(bound_key)
            if isinstance(trials, int) and isinstance(host, int) and trials > 0 and host * 2 > trials:
                return True
        return False

    out = ["candidate"] if bound(candidate_info) else []
    return out + sorted(m for m, info in baseline_info.items() if bound(info))


def launch_hiding_for(settings: _timing.TimerSettings, profile: dict[str, Any],
                      spin_cycles_per_ms: float | None = None) -> tuple[_timing.TimerSettings, str | None]:
    """The candidate's timer settings under ``hide_launch``: the spin before each start event does not
    hold back other streams, so a candidate whose profiled call used more than one stream, or whose
    streams are unknown (no profile), is timed without it.

    Args:
        settings: the block's settings (``hide_launch`` as the protocol asks).
        profile: the launch check's result for the candidate (``streams``: the CUDA streams its kernels
            ran on; ``error`` when the profiler was unavailable).
        spin_cycles_per_ms: the spin's speed as the trusted side measured it
            (:func:`.timing.spin_cycles_per_ms`), given to the candidate's timer when hiding stays on.

    Returns:
        ``(settings, note)``: the same object when nothing changes, else a copy with ``hide_launch``
        off, and a note for ``timing_info["launch_hiding"]`` (None when hiding is off or kept).
    """
    if not settings.hide_launch:
        return settings, None
    streams = profile.get("streams")
    if not isinstance(streams, list) or "error" in profile:
        return dataclasses.replace(settings, hide_launch=False), "off: the candidate's streams are unknown"
    if len(streams) > 1:
        return (dataclasses.replace(settings, hide_launch=False),
                f"off: the candidate's profiled call ran kernels on {len(streams)} streams")
    if not settings.spin_cycles_per_ms and spin_cycles_per_ms is not None:
        # the spin's speed measured here, not in the candidate's process (which could load the GPU
        # while it is measured and so stretch its own spin)
        settings = dataclasses.replace(settings, spin_cycles_per_ms=spin_cycles_per_ms)
    return settings, "on"


def block_settings(settings: _timing.TimerSettings, rounds: int) -> _timing.TimerSettings:
    """One block's share of ``settings`` when timing alternates over ``rounds`` rounds: the trials,
    the trial cap, the time budget and the minimum time divided (at least 3 trials a block); warm-ups kept (each block
    warms up again after the others ran)."""
    if rounds <= 1 or not settings.adaptive:
        return settings
    return dataclasses.replace(_timing.segment_settings(settings, rounds), placements=settings.placements)


def _default_scratch() -> Path:
    shm = Path("/dev/shm")
    try:
        st = os.statvfs(shm)
        if st.f_bavail * st.f_frsize > 8 << 30 and os.access(shm, os.W_OK):
            return shm / "kbench"
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / "kbench"


def _default_memory_limit() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024 // 2
    except OSError:
        pass
    return 16 << 30
