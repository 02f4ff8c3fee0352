"""One timing code path for candidates, eager and torch.compile alike.

Timers (chosen by the protocol; a CPU device always uses the wall clock):

- ``cuda_events``: a CUDA event pair around each call on the current stream, an L2 flush before
  each trial outside the timed region, the device synchronised before each trial. Each trial also
  records a synchronised host time (call + device-wide synchronise), so work that escapes the
  current stream (side streams, deferred launches) shows up as a gap between the two.
- ``profiler``: CUDA Agent's method: ``torch.profiler`` over ``trials`` iterations after the
  warm-ups; time = summed device time of the kernels / iterations.
- ``wall``: ``time.perf_counter_ns`` around each call.

Warm-up: ``warmup`` calls, then (``warmup_ms`` > 0) more calls, each after an L2 flush and followed
by a synchronise as in the timed loop, until ``warmup_ms`` milliseconds of wall time have passed
since the first. A GPU left idle drops its clocks; a few calls of a short kernel (5 calls of a
0.1 ms kernel) end before the clocks are back up, and the first trials then measure the ramp.

Adaptive trials (``kbench`` protocol): after ``trials`` trials and at least ``min_time_s`` seconds of
timing, continue until the 95% confidence interval of the median is within ``target_ci_rel`` of the
median; stop early at ``max_trials`` or after ``time_budget_s`` seconds of timing. The minimum time
makes a short kernel's median cover more than a few milliseconds of the machine's state: a 95% CI
of the median within 1% after 20 trials of a 0.1 ms kernel says little about the next run.

The timer functions are captured when this module is imported. In a candidate worker that happens
before the candidate's code is imported, so a candidate that replaces ``torch.cuda.Event.elapsed_time``
or ``time.perf_counter`` does not change what this module calls (and :func:`timer_identity_findings`
reports the replacement).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..core import TimingStats

__all__ = [
    "TimerSettings",
    "time_callable",
    "summarize_samples",
    "median_ci95",
    "l2_flush_bytes_for",
    "round_sig",
    "original_timers",
    "refresh_values",
]

# Captured at import (before any candidate code runs in this interpreter).
_perf_counter_ns = time.perf_counter_ns
_Event = torch.cuda.Event
_elapsed_time = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_synchronize = torch.cuda.synchronize
_event_synchronize = torch.cuda.Event.synchronize


REFRESH_WIGGLE = 2.0 ** -12


def refresh_values(src: torch.Tensor, round_: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """The values a floating input holds in timed round ``round_`` (EXPLOITS K-16), computed the same
    way by the candidate process (into its buffers, before each timed trial) and by the trusted side
    (to judge the output of a timed call)::

        src * (s_r + w * cos(1.7 * src / (1 + |src|) + 0.37 * (r mod 4096)))
        s_r = 1 +- ((r // 2) mod 1000 + 1) * 2^-17   (sign alternating with r)
        w = max(2^-12, 2 * eps(dtype))               (float32 arithmetic for fp16 / bf16 inputs)

    New values every round, yet the problem's structure is kept: zeros stay zero, signs and infinities
    stay, equal elements stay equal (symmetric or triangular matrices remain so) and order is kept (the
    map is increasing: its slope is at least ``s_r - 1.5 w > 0``). The factor
    varies from element to element, so the output of a scale-invariant problem (a norm's
    normalisation, LayerNorm) changes too: a result cached on approximate contents is wrong for it.

    Args:
        src: the input set's floating tensor as stored (any shape, the run's floating dtype).
        round_: the refresh round (>= 0), counted across the run's timed blocks.
        out: optional destination, same shape and dtype as ``src``.

    Returns:
        ``out`` (or a new tensor) holding the refreshed values; deterministic for a given device,
        dtype and ``round_``.
    """
    r = int(round_)
    scale = 1.0 + (1 if r % 2 else -1) * ((r // 2) % 1000 + 1) * 2.0 ** -17
    # float32 arithmetic for half-precision inputs, and a wiggle of at least two of their ulps, so the
    # values do change there too
    work = src if src.dtype in (torch.float32, torch.float64) else src.float()
    wiggle = max(REFRESH_WIGGLE, 2.0 * torch.finfo(src.dtype).eps)
    # the cosine's argument is bounded (1.7 x / (1 + |x|)), so the map stays increasing for every x
    arg = work / (work.abs() + 1.0)
    factor = torch.cos(arg.mul_(1.7).add_(0.37 * (r % 4096)))
    factor.mul_(wiggle).add_(scale)
    factor.nan_to_num_(nan=scale)  # +-inf inputs (cos(nan)): only the uniform scale, so they stay +-inf
    if work is src:
        return torch.mul(src, factor, out=out)
    res = torch.mul(work, factor).to(src.dtype)
    return out.copy_(res) if out is not None else res


def original_timers() -> dict[str, Any]:
    """The timer callables as captured at import, by name (for identity checks after candidate import)."""
    return {
        "time.perf_counter_ns": _perf_counter_ns,
        "torch.cuda.Event": _Event,
        "torch.cuda.Event.elapsed_time": _elapsed_time,
        "torch.cuda.Event.record": _record,
        "torch.cuda.synchronize": _synchronize,
    }


@dataclass(frozen=True, slots=True)
class TimerSettings:
    """What :func:`time_callable` needs from a protocol (see ``Protocol`` for meanings)."""

    timer: str = "wall"
    warmup: int = 3
    trials: int = 20
    adaptive: bool = False
    max_trials: int = 200
    target_ci_rel: float = 0.01
    time_budget_s: float = 5.0
    warmup_ms: float = 0.0
    min_time_s: float = 0.0
    discard_first: bool = False
    statistic: str = "median"
    l2_flush_bytes: int = 0
    round_sig: int | None = None

    @classmethod
    def from_protocol(cls, protocol: Any, device: torch.device) -> "TimerSettings":
        """Settings of ``protocol`` on ``device``; a CPU device uses the wall clock and at most 1 s of
        adaptive timing and no time-based warm-up or minimum timing time (CPU runs are smoke tests of
        the pipeline, not kernel measurements)."""
        timer = protocol.timer if device.type == "cuda" else "wall"
        flush = 0
        if device.type == "cuda" and protocol.l2_flush != "none":
            flush = l2_flush_bytes_for(device, protocol.l2_flush, protocol.l2_flush_bytes)
        return cls(timer=timer, warmup=protocol.warmup, trials=protocol.trials, adaptive=protocol.adaptive,
                   max_trials=protocol.max_trials, target_ci_rel=protocol.target_ci_rel,
                   time_budget_s=protocol.time_budget_s if device.type == "cuda" else min(1.0, protocol.time_budget_s),
                   warmup_ms=float(getattr(protocol, "warmup_ms", 0.0)) if device.type == "cuda" else 0.0,
                   min_time_s=float(getattr(protocol, "min_time_s", 0.0)) if device.type == "cuda" else 0.0,
                   discard_first=protocol.discard_first,
                   statistic=protocol.statistic, l2_flush_bytes=flush, round_sig=protocol.round_sig)


def l2_flush_bytes_for(device: torch.device, policy: str, fixed_bytes: int) -> int:
    """Bytes to write between trials to evict the L2 cache.

    Args:
        device: a CUDA device.
        policy: ``fixed`` (``fixed_bytes``, KernelBench's 256 MiB) or ``device`` (at least twice the
            device's L2 size as reported by ``torch.cuda.get_device_properties``, and at least ``fixed_bytes``).
    """
    if policy == "fixed":
        return int(fixed_bytes)
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    return max(2 * l2, int(fixed_bytes))


def round_sig(x: float, sig: int) -> float:
    """Round ``x`` to ``sig`` significant figures (KernelBench rounds times to 3)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, sig - 1 - int(math.floor(math.log10(abs(x)))))


def median_ci95(sorted_samples: Sequence[float]) -> tuple[float, float]:
    """Distribution-free 95% CI of the median from order statistics (normal approximation to the
    binomial: ranks ``n/2 -+ 1.96 sqrt(n)/2``). Needs sorted input; n < 6 gives (min, max)."""
    n = len(sorted_samples)
    if n == 0:
        return (float("nan"), float("nan"))
    if n < 6:
        return (sorted_samples[0], sorted_samples[-1])
    half = 1.96 * math.sqrt(n) / 2.0
    lo = max(0, int(math.floor(n / 2.0 - half)))
    hi = min(n - 1, int(math.ceil(n / 2.0 + half)) - 1)
    return (sorted_samples[lo], sorted_samples[hi])


def summarize_samples(samples_ms: Sequence[float], *, timer: str, statistic: str,
                      round_to: int | None = None) -> TimingStats:
    """:class:`TimingStats` of raw trial times in ms (rounding, if any, applies to mean and median only)."""
    s = sorted(samples_ms)
    n = len(s)
    mean = statistics.fmean(s) if n else float("nan")
    med = statistics.median(s) if n else float("nan")
    std = statistics.stdev(s) if n > 1 else 0.0
    lo, hi = median_ci95(s)
    if round_to:
        mean, med = round_sig(mean, round_to), round_sig(med, round_to)
    return TimingStats(median_ms=med, mean_ms=mean, std_ms=std, min_ms=s[0] if n else float("nan"),
                       max_ms=s[-1] if n else float("nan"), ci95_low_ms=lo, ci95_high_ms=hi, n=n,
                       samples_ms=tuple(samples_ms), timer=timer, statistic=statistic)


class _Flusher:
    def __init__(self, device: torch.device, nbytes: int) -> None:
        self.buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device) if nbytes > 0 else None

    def __call__(self) -> None:
        if self.buf is not None:
            self.buf.zero_()


def time_callable(
    fn: Callable[[int], Any],
    device: torch.device,
    settings: TimerSettings,
    *,
    between: Callable[[], None] | None = None,
) -> tuple[TimingStats, dict[str, Any]]:
    """Time ``fn`` under ``settings``.

    Args:
        fn: called as ``fn(i)`` for trial (or warm-up) index ``i``; it should run the model on input
            set ``i mod k`` (input rotation is the caller's choice).
        device: where ``fn`` runs; ``cpu`` forces the wall clock.
        settings: timer, warm-ups, trials, adaptive stopping, L2 flush size.
        between: optional callable run before every trial, outside the timed region.

    Returns:
        ``(stats, info)``: stats in ms over the kept trials; ``info`` holds ``synced_ms`` (per-trial
        host time of call + device-wide synchronise, cuda_events only), ``elapsed_s`` (timed loop,
        seconds), ``warmup_calls`` and ``warmup_s`` (all warm-up calls and their wall seconds) and
        ``stopped`` (``ci``, ``max_trials``, ``budget``, ``fixed``).
    """
    is_cuda = device.type == "cuda"
    timer = settings.timer if is_cuda else "wall"
    if timer == "profiler":
        return _time_profiler(fn, device, settings)
    flush = _Flusher(device, settings.l2_flush_bytes) if is_cuda else None
    w0 = _perf_counter_ns()
    for i in range(settings.warmup):
        fn(i)
    i = settings.warmup
    if is_cuda:
        _synchronize(device)
    # time-based warm-up: the timed loop's rhythm (flush, call, synchronise) until warmup_ms have passed
    while settings.warmup_ms > 0 and (_perf_counter_ns() - w0) / 1e6 < settings.warmup_ms:
        if flush is not None:
            flush()
        fn(i)
        i += 1
        if is_cuda:
            _synchronize(device)
    warmup_calls, warmup_s = i, (_perf_counter_ns() - w0) / 1e9
    samples: list[float] = []
    synced: list[float] = []
    t0 = _perf_counter_ns()
    stopped = "fixed"
    i = 0  # the timed trials are numbered from 0 again (callers rotate input sets by it)
    target_n = settings.trials + (1 if settings.discard_first else 0)
    while True:
        if between is not None:
            between()
        if timer == "cuda_events":
            flush()  # type: ignore[misc]
            _synchronize(device)
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            h0 = _perf_counter_ns()
            _record(start)
            fn(i)
            _record(end)
            _synchronize(device)  # every stream, so side-stream work ends inside the host interval
            h1 = _perf_counter_ns()
            samples.append(_elapsed_time(start, end))
            synced.append((h1 - h0) / 1e6)
        else:
            h0 = _perf_counter_ns()
            fn(i)
            if is_cuda:
                _synchronize(device)
            samples.append((_perf_counter_ns() - h0) / 1e6)
        i += 1
        n = len(samples) - (1 if settings.discard_first else 0)
        if not settings.adaptive:
            if len(samples) >= target_n:
                break
            continue
        if n >= settings.max_trials:
            stopped = "max_trials"
            break
        if (_perf_counter_ns() - t0) / 1e9 > settings.time_budget_s and n >= min(settings.trials, 3):
            stopped = "budget"
            break
        if n >= settings.trials and (_perf_counter_ns() - t0) / 1e9 >= settings.min_time_s:
            kept = sorted(samples[1:] if settings.discard_first else samples)
            lo, hi = median_ci95(kept)
            med = statistics.median(kept)
            if med > 0 and (hi - lo) / 2.0 / med <= settings.target_ci_rel:
                stopped = "ci"
                break
    if settings.discard_first and samples:
        samples = samples[1:]
        synced = synced[1:]
    stats = summarize_samples(samples, timer=timer, statistic=settings.statistic, round_to=settings.round_sig)
    info = {"synced_ms": synced, "elapsed_s": (_perf_counter_ns() - t0) / 1e9, "stopped": stopped,
            "l2_flush_bytes": settings.l2_flush_bytes, "warmup_calls": warmup_calls, "warmup_s": round(warmup_s, 4)}
    return stats, info


def _time_profiler(fn: Callable[[int], Any], device: torch.device,
                   settings: TimerSettings) -> tuple[TimingStats, dict[str, Any]]:
    """CUDA Agent's timer: profiler device time summed over kernels / iterations (ms)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for i in range(settings.warmup):
        fn(i)
    _synchronize(device)
    t0 = _perf_counter_ns()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(settings.trials):
            fn(i)
        _synchronize(device)
    total_us = 0.0
    kernels = 0
    for ev in prof.events():
        if ev.device_type == DeviceType.CUDA:
            total_us += float(getattr(ev, "self_device_time_total", 0.0) or ev.device_time_total)
            kernels += 1
    per_iter_ms = total_us / 1000.0 / max(1, settings.trials)
    stats = summarize_samples([per_iter_ms], timer="profiler", statistic=settings.statistic,
                              round_to=settings.round_sig)
    stats = TimingStats(**{**stats.to_dict(), "samples_ms": (per_iter_ms,), "n": settings.trials,
                           "median_ms": stats.median_ms, "mean_ms": stats.mean_ms})
    return stats, {"kernels": kernels, "elapsed_s": (_perf_counter_ns() - t0) / 1e9, "stopped": "fixed"}
