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

Placements (``placements``; 1 in every protocol): on an H200 (2026-12-01,
``scripts/gpu/timing_drift.py --realloc``) a 0.06 ms matrix-vector product sat at 0.064 ms in one
process and at 0.078 ms after its inputs had been allocated again, clocks fixed at 1980 MHz. Timing in
four placements (session 7, 20 level-1 candidates, two runs) then showed the placements of one eager
baseline spreading by a median 1.0% (candidates 0.6%) while the two runs' eager times differed by a
median 6.6% (p90 34%): the levels are mostly the host's launch latency (see launch hiding below), not
where the tensors sit. Placements stay available to measure placement sensitivity. With
``placements`` = P > 1 and a ``relocate`` callback, the
timed loop runs in P segments; before segments 1..P-1 the caller's input sets move to newly allocated
device memory behind a spacer allocation of another size (:class:`Placer`), the last output of the
segment before stays allocated (so the next outputs cannot reuse its block; temporaries freed inside
a segment may still be reused by size), and the callable warms up again. Each segment gets 1/P of the
trials (fixed or adaptive), the trial cap, the time budget and the minimum time. The reported median is the mean of
the P segments' medians and its 95% interval combines the spread across placements (Student's t over
the P medians) with the segments' own intervals, so the interval covers what another run, with other
addresses, would see.

Launch hiding (``hide_launch``, cuda_events only; on in ``kbench``, off in ``kernelbench`` and
``cuda-agent``): before each trial's start event the GPU is given a spin (``torch.cuda._sleep``) of about three times the host's time to
launch one call (at least 0.05 ms, at most ``spin_max_ms``; measured during warm-up), so the call's kernels are
queued before the start event fires and the pair measures the GPU's work, not the host's launch
latency. Each trial's time is the larger of that device time and the host's time to issue the call
(start event, the call, end event): a call's time when calls are issued back to back. Host work (a
result computed on the CPU, then copied) counts through the host time, and a launch-bound call (a few
microseconds of GPU work) is timed by its host time. On an H200 (session 7,
``scripts/gpu/launch_bound.py``) single-call times of sub-3 ms eager problems sat on levels 2-23%
apart in different processes, while the same calls timed with the spin agreed within 0.04-2.5% (20
calls back to back: 0.3-2.4%): the levels were host launch latency inside the timed region. A call
whose launch outlasts the spin is timed as before (its gap counts; ``info["launch_exposed"]``). Work a
candidate puts on another stream is not held behind the spin and can run, untimed, while the current stream sleeps (the side-stream check sees only work that ends after
the end event); the trusted side therefore times a candidate that used more than one stream in its
profiled call without the spin. The spin is at most ``spin_max_ms`` (the protocol's
``hide_launch_max_ms``, 0.5 ms), and a candidate's cycles per ms come from the trusted side
(:func:`spin_cycles_per_ms`), so slow warm-up calls or a loaded GPU cannot stretch it. A candidate that
uses one stream when profiled and a second when timed can still hide up to that much side-stream work
per call: not yet closed.

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

import dataclasses
import hashlib
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
    "Placer",
    "segment_settings",
    "pool_placement_samples",
    "spin_cycles_per_ms",
]

# Captured at import (before any candidate code runs in this interpreter).
_perf_counter_ns = time.perf_counter_ns
_Event = torch.cuda.Event
_elapsed_time = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_synchronize = torch.cuda.synchronize
_event_synchronize = torch.cuda.Event.synchronize
_clone = torch.Tensor.clone
_sleep = getattr(torch.cuda, "_sleep", None)  # a GPU spin of N cycles on the current stream
_empty = torch.empty
_empty_cache = torch.cuda.empty_cache
_Tensor = torch.Tensor
_isinstance = isinstance


REFRESH_WIGGLE = 2.0 ** -12


def keyed_round(round_: int, key: int) -> int:
    """The round :func:`refresh_values` draws its parameters from: ``round_`` itself for ``key`` 0, else a 64-bit
    BLAKE2b of both. With the job's secret key (the trusted side's, per run and problem), a candidate that knows
    the formula cannot compute a timed round's values ahead of the call that receives them: it found the public
    rounds 0-2000 for every set while it was judged, and returned looked-up outputs while timed (helper-56's attack
    E, judged correct at 1.8-2.0x against eager)."""
    r = int(round_)
    if not key:
        return r
    digest = hashlib.blake2b(f"{int(key)}:{r}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def refresh_values(src: torch.Tensor, round_: int, out: torch.Tensor | None = None, key: int = 0) -> torch.Tensor:
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
        key: the job's refresh key (0: none; :func:`keyed_round` then gives ``round_``, as before keys).

    Returns:
        ``out`` (or a new tensor) holding the refreshed values; deterministic for a given device,
        dtype, ``round_`` and ``key``.
    """
    r = keyed_round(round_, key)
    scale = 1.0 + (1 if r % 2 else -1) * ((r // 2) % 1000 + 1) * 2.0 ** -17
    # float32 arithmetic for half-precision inputs, and a wiggle of at least two of their ulps, so the
    # values do change there too
    grad = out is None and src.requires_grad and torch.is_grad_enabled()
    src = src.detach()  # the buffer steps below are written with out=, which autograd does not take
    work = src if src.dtype in (torch.float32, torch.float64) else src.float()
    wiggle = max(REFRESH_WIGGLE, 2.0 * torch.finfo(src.dtype).eps)
    # the cosine's argument is bounded (1.7 x / (1 + |x|)), so the map stays increasing for every x. One
    # buffer of the source's size holds each step in turn (the trusted side refreshes multi-GiB sets beside
    # the float64 reference's outputs): the same operations, in the same order, as with a tensor per step
    factor = work.abs()
    factor.add_(1.0)
    torch.div(work, factor, out=factor)
    factor.mul_(1.7).add_(0.37 * (r % 4096)).cos_()
    factor.mul_(wiggle).add_(scale)
    factor.nan_to_num_(nan=scale)  # +-inf inputs (cos(nan)): only the uniform scale, so they stay +-inf
    if work is src:
        res = torch.mul(src, factor, out=factor if out is None else out)
    else:
        res = torch.mul(work, factor, out=factor).to(src.dtype)
        if out is not None:
            return out.copy_(res)
    # an input that requires grad gives refreshed values that do too (as a new leaf: same values)
    return res.requires_grad_() if grad else res


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
    placements: int = 1
    hide_launch: bool = False
    spin_max_ms: float = 0.5
    spin_cycles_per_ms: float = 0.0

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
                   statistic=protocol.statistic, l2_flush_bytes=flush, round_sig=protocol.round_sig,
                   placements=max(1, int(getattr(protocol, "placements", 1))),
                   hide_launch=bool(getattr(protocol, "hide_launch", False)) and device.type == "cuda",
                   spin_max_ms=float(getattr(protocol, "hide_launch_max_ms", 0.5)))


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


def split_placements(samples_ms: Sequence[float], counts: Sequence[int]) -> list[list[float]]:
    """A block's kept trials (ms, in order) cut into its placements' (``counts``: each placement's kept trials,
    ``info["placement_n"]``)."""
    out, at = [], 0
    for c in counts:
        out.append(list(samples_ms[at:at + int(c)]))
        at += int(c)
    return out


def stats_from_samples(stats: TimingStats, info: dict[str, Any], settings: TimerSettings) -> TimingStats:
    """The summary of one timed block as the trusted side derives it from the block's raw samples, so that a
    summary computed in the candidate's process (whose ``statistics`` or ``math`` it could have replaced)
    is never taken as reported.

    Args:
        stats: the block as the candidate's process reported it (``samples_ms``: the kept trials, ms).
        info: the block's info dict; ``placement_n`` (the kept trials of each placement, in order) where the
            block was timed in several placements.
        settings: the block's timer settings (``statistic``, ``round_sig`` and the placement pooling's).

    Returns:
        ``stats`` with ``median_ms``, ``mean_ms``, ``std_ms``, ``min_ms``, ``max_ms``, the 95% interval and ``n``
        computed here from ``samples_ms`` as :func:`time_callable` computes them; ``stats`` itself for the
        ``profiler`` timer (one per-iteration figure, no trials to summarise) or a block with no samples.
    """
    samples = [float(x) for x in stats.samples_ms]
    if stats.timer == "profiler" or not samples:
        return stats
    counts = info.get("placement_n")
    if isinstance(counts, list) and len(counts) > 1 and sum(int(c) for c in counts) == len(samples):
        return pool_placement_samples(split_placements(samples, counts), settings, stats.timer)
    return summarize_samples(samples, timer=stats.timer, statistic=settings.statistic, round_to=settings.round_sig)


def stats_forged(reported: TimingStats, derived: TimingStats) -> list[str]:
    """The summary fields (``median_ms``, ``mean_ms``, ``min_ms``, ``max_ms``) in which a block's reported
    summary differs from :func:`stats_from_samples`'s (relative tolerance 1e-9: the same arithmetic on the same
    samples agrees exactly); empty when they agree."""
    out = []
    for name in ("median_ms", "mean_ms", "min_ms", "max_ms"):
        a, b = float(getattr(reported, name)), float(getattr(derived, name))
        if not (a == b or (math.isnan(a) and math.isnan(b))
                or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-9 * max(abs(a), abs(b)))):
            out.append(name)
    return out


class _Flusher:
    def __init__(self, device: torch.device, nbytes: int) -> None:
        self.buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device) if nbytes > 0 else None

    def __call__(self) -> None:
        if self.buf is not None:
            self.buf.zero_()


# Student's t, two-sided 95%, by degrees of freedom (the interval over P placement medians)
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def _t95(df: int) -> float:
    """Student's t (two-sided 95%) for ``df`` degrees of freedom, from the table: the nearest tabulated
    df at or below ``df`` (a t at least as large as the exact one, so the interval is never narrower)."""
    if df <= 0:
        return float("inf")
    return _T95[max(k for k in _T95 if k <= df)]


class Placer:
    """Moves input sets to newly allocated device memory between timing placements (see the module
    docstring): ``relocate(p)`` as :func:`time_callable` calls it.

    Args:
        sets: the caller's input sets, a list of argument lists; tensors in it are replaced, in place in
            the outer list (``sets[j] = [...]``), by clones in new memory, so closures that index
            ``sets`` see the moved tensors. Values, dtypes and shapes are kept; strides are kept for
            dense tensors (expanded or overlapping ones become contiguous, as ``clone`` makes them).
        device: where the tensors live (the spacer is allocated there).
        spacer_mib: the spacer held during placement ``p`` is ``(7 p mod spacer_mib) + 1`` MiB plus
            ``p`` x 4 KiB, so consecutive placements differ in size and alignment.

    Earlier placements' tensors stay allocated (``retired``) until :meth:`release`, so a later
    placement cannot land in an earlier one's freed blocks (a caching allocator hands a freed block of
    the same size straight back, and placements would alternate between two addresses).

    Attributes:
        moved: placements that moved the sets; ``skipped``: placements that did not, because the device
        lacked free memory for two more copies of the sets (then the placement repeats the last one).
    """

    def __init__(self, sets: list[list[Any]], device: torch.device, *, spacer_mib: int = 61) -> None:
        self.sets = sets
        self.device = device
        self.spacer_mib = max(1, int(spacer_mib))
        self.spacer: torch.Tensor | None = None
        self.retired: list[Any] = []
        self.moved = 0
        self.skipped = 0

    def nbytes(self) -> int:
        """Bytes of the tensors in the sets (each storage once)."""
        seen: set[int] = set()
        total = 0
        for s in self.sets:
            for x in s:
                if _isinstance(x, _Tensor) and x.untyped_storage().data_ptr() not in seen:
                    seen.add(x.untyped_storage().data_ptr())
                    total += x.untyped_storage().nbytes()
        return total

    def __call__(self, p: int) -> bool:
        """Move the sets for placement ``p`` (>= 1). Returns whether they moved (False: too little free
        device memory for the copy and the outputs of the placement before, see ``skipped``)."""
        spacer_bytes = (((7 * p) % self.spacer_mib) + 1) * (1 << 20) + p * 4096
        if self.device.type == "cuda":
            free, _total = torch.cuda.mem_get_info(self.device)
            if free < 3 * self.nbytes() + spacer_bytes + (256 << 20):
                self.skipped += 1
                return False
        try:
            spacer = _empty(spacer_bytes, dtype=torch.uint8, device=self.device)
            # every clone is made while the old tensors are alive, so no clone reuses an old tensor's block
            new = [[_clone(x) if _isinstance(x, _Tensor) else x for x in s] for s in self.sets]
        except (RuntimeError, MemoryError):  # out of memory (the check above is an estimate): stay put
            self.skipped += 1
            return False
        if self.spacer is not None:
            self.retired.append(self.spacer)
        self.spacer = spacer
        self.retired.append(list(self.sets))
        self.sets[:] = new
        self.moved += 1
        return True

    def release(self) -> None:
        """Free the spacers and the earlier placements' tensors (the sets stay where the last placement
        put them), and on a GPU hand the freed copies back to the driver rather than keep them in this
        process's allocator cache: on an H200 a candidate's cached copies of L1/20's 6 GB sets (110 GiB)
        most likely left the trusted side out of memory."""
        self.spacer = None
        self.retired.clear()
        if self.moved and self.device.type == "cuda":
            _empty_cache()


def segment_settings(settings: TimerSettings, parts: int) -> TimerSettings:
    """One segment's share of adaptive ``settings`` when timing is split into ``parts`` segments
    (placements or alternated blocks): trials, trial cap, time budget and minimum time divided (at least
    3 trials a segment); warm-up calls kept. Fixed settings (``adaptive`` False) come back unchanged:
    :func:`time_callable` divides their trials over placements itself, and alternated blocks of a fixed
    protocol each run all of them."""
    if parts <= 1 or not settings.adaptive:
        return settings
    return dataclasses.replace(settings, trials=max(3, -(-settings.trials // parts)),
                       max_trials=max(3, -(-settings.max_trials // parts)),
                       time_budget_s=settings.time_budget_s / parts,
                       min_time_s=settings.min_time_s / parts, placements=1)


def time_callable(
    fn: Callable[[int], Any],
    device: torch.device,
    settings: TimerSettings,
    *,
    between: Callable[[], None] | None = None,
    relocate: Callable[[int], bool] | None = None,
) -> tuple[TimingStats, dict[str, Any]]:
    """Time ``fn`` under ``settings``.

    Args:
        fn: called as ``fn(i)`` for trial (or warm-up) index ``i``; it should run the model on input
            set ``i mod k`` (input rotation is the caller's choice). Timed trials are numbered from 0
            and on across placements.
        device: where ``fn`` runs; ``cpu`` forces the wall clock.
        settings: timer, warm-ups, trials, adaptive stopping, L2 flush size, placements.
        between: optional callable run before every trial, outside the timed region.
        relocate: with ``settings.placements`` > 1, called as ``relocate(p) -> bool`` before placement ``p``
            (1..P-1), outside the timed region: it should move ``fn``'s inputs to new device memory
            and return whether it did (:class:`Placer`). When it did, the last output of the placement
            before is kept alive until timing ends, so ``fn``'s outputs move too. None: one placement.

    Returns:
        ``(stats, info)``: stats in ms over the kept trials; ``info`` holds ``synced_ms`` (per-trial
        host time of call + device-wide synchronise, cuda_events only), ``elapsed_s`` (timed loops,
        seconds), ``warmup_calls`` and ``warmup_s`` (all warm-up calls and their wall seconds) and
        ``stopped`` (``ci``, ``max_trials``, ``budget``, ``fixed``; ``placements:<P>`` when split).
        With placements, also ``placements`` (P), ``placement_medians_ms`` (each segment's median),
        ``placement_n`` (each segment's trials), ``placement_stopped`` and ``placement_spread_rel``
        ((max - min) of the segment medians over the reported median).
    """
    is_cuda = device.type == "cuda"
    timer = settings.timer if is_cuda else "wall"
    if timer == "profiler":
        return _time_profiler(fn, device, settings)
    flush = _Flusher(device, settings.l2_flush_bytes) if is_cuda else None
    hide = _LaunchHider(device, settings) if (settings.hide_launch and is_cuda and timer == "cuda_events"
                                        and _sleep is not None) else None
    paced = _HostPacing() if hide is None and is_cuda and timer == "cuda_events" else None
    parts = settings.placements if relocate is not None else 1
    if parts <= 1:
        seg = _timed_loop(fn, device, settings, timer, flush, between, 0, hide, paced=paced)
        samples, synced = seg["samples"], seg["synced"]
        if settings.discard_first and samples:
            samples, synced = samples[1:], synced[1:]
        stats = summarize_samples(samples, timer=timer, statistic=settings.statistic, round_to=settings.round_sig)
        info = {"synced_ms": synced, "elapsed_s": seg["elapsed_s"], "stopped": seg["stopped"],
                "l2_flush_bytes": settings.l2_flush_bytes, "warmup_calls": seg["warmup_calls"],
                "warmup_s": round(seg["warmup_s"], 4)}
        for counter in (hide, paced):
            if counter is not None:
                info.update(counter.info())
        return stats, info
    share = segment_settings(settings, parts)
    if not settings.adaptive:  # a fixed trial count is shared out too (at least one trial a placement)
        share = dataclasses.replace(settings, trials=max(1, -(-settings.trials // parts)), placements=1)
    segs: list[dict[str, Any]] = []
    held: list[Any] = []  # earlier placements' last outputs: the next outputs cannot reuse their blocks
    index0 = 0
    for p in range(parts):
        if p:
            last = segs[-1].pop("last", None)
            if relocate(p):  # type: ignore[misc]
                held.append(last)
            del last
        # the first placement warms the GPU up from idle; later ones only re-warm the moved tensors
        seg_settings = share if p == 0 else dataclasses.replace(share, warmup_ms=share.warmup_ms / parts)
        seg = _timed_loop(fn, device, seg_settings, timer, flush, between, index0, hide, keep_last=True,
                          paced=paced)
        index0 += len(seg["samples"])
        if settings.discard_first and seg["samples"]:
            seg["samples"], seg["synced"] = seg["samples"][1:], seg["synced"][1:]
        segs.append(seg)
    segs[-1].pop("last", None)
    held.clear()
    info = _placement_info(segs, settings)
    for counter in (hide, paced):
        if counter is not None:
            info.update(counter.info())
    return _pool_placements(segs, settings, timer), info


def pool_placement_samples(samples_by_placement: Sequence[Sequence[float]], settings: TimerSettings,
                           timer: str) -> TimingStats:
    """:class:`TimingStats` of timings taken in several placements (ms, one list per placement): the
    median is the mean of the placements' medians, the 95% interval is that mean
    +- sqrt(b^2 + w^2), with ``b`` Student's t (P - 1 degrees of freedom) times the standard error of
    the P medians and ``w`` the root-sum-square of the placements' own median half-intervals over P;
    mean, std, min, max and ``n`` are over every sample."""
    return _pool_placements([{"samples": list(s)} for s in samples_by_placement], settings, timer)


def _pool_placements(segs: list[dict[str, Any]], settings: TimerSettings, timer: str) -> TimingStats:
    """Stats over every segment's samples, with the median and its interval taken across placements."""
    samples = [x for s in segs for x in s["samples"]]
    pooled = summarize_samples(samples, timer=timer, statistic=settings.statistic)
    meds, halves = [], []
    for s in segs:
        srt = sorted(s["samples"])
        if not srt:
            continue
        meds.append(statistics.median(srt))
        lo, hi = median_ci95(srt)
        halves.append((hi - lo) / 2.0)
    if not meds:
        return pooled
    centre = statistics.fmean(meds)
    between = _t95(len(meds) - 1) * statistics.stdev(meds) / math.sqrt(len(meds)) if len(meds) > 1 else 0.0
    within = math.sqrt(sum(h * h for h in halves)) / len(halves)  # the mean's share of each segment's interval
    half = math.hypot(between, within)
    if not math.isfinite(half):
        half = max(meds) - min(meds)
    med, mean = centre, pooled.mean_ms
    if settings.round_sig:
        med, mean = round_sig(med, settings.round_sig), round_sig(mean, settings.round_sig)
    return TimingStats(median_ms=med, mean_ms=mean, std_ms=pooled.std_ms, min_ms=pooled.min_ms,
                       max_ms=pooled.max_ms, ci95_low_ms=centre - half, ci95_high_ms=centre + half,
                       n=pooled.n, samples_ms=tuple(samples), timer=timer, statistic=settings.statistic)


def _placement_info(segs: list[dict[str, Any]], settings: TimerSettings) -> dict[str, Any]:
    meds = [statistics.median(s["samples"]) if s["samples"] else float("nan") for s in segs]
    finite = [m for m in meds if math.isfinite(m)]
    centre = statistics.fmean(finite) if finite else float("nan")
    return {"synced_ms": [x for s in segs for x in s["synced"]],
            "elapsed_s": sum(s["elapsed_s"] for s in segs), "stopped": f"placements:{len(segs)}",
            "l2_flush_bytes": settings.l2_flush_bytes,
            "warmup_calls": sum(s["warmup_calls"] for s in segs),
            "warmup_s": round(sum(s["warmup_s"] for s in segs), 4),
            "placements": len(segs), "placement_medians_ms": [round(m, 6) for m in meds],
            "placement_n": [len(s["samples"]) for s in segs],
            "placement_stopped": [s["stopped"] for s in segs],
            "placement_spread_rel": (round((max(finite) - min(finite)) / centre, 6)
                                     if finite and centre > 0 else None)}


def spin_cycles_per_ms(device: torch.device) -> float:
    """GPU cycles per millisecond of ``torch.cuda._sleep`` on ``device`` (one timed 1M-cycle spin, after
    which the clocks are whatever the device runs at now). The trusted side measures it in its own
    process and hands it to a candidate's timer (``TimerSettings.spin_cycles_per_ms``), so a candidate
    cannot lengthen its spin by loading the GPU while the spin is calibrated."""
    _synchronize(device)
    a, b = _Event(enable_timing=True), _Event(enable_timing=True)
    _record(a)
    _sleep(1_000_000)  # type: ignore[misc]
    _record(b)
    _synchronize(device)
    return 1_000_000 / max(1e-6, _elapsed_time(a, b))


class _LaunchHider:
    """The GPU spin before each trial's start event (see the module docstring): 3x the host's launch
    time of the callable (median of its counted warm-up calls), at least 0.05 ms and at most
    ``settings.spin_max_ms``; cycles per ms from ``settings.spin_cycles_per_ms`` when the trusted side
    gave them, else measured here."""

    def __init__(self, device: torch.device, settings: TimerSettings) -> None:
        self.device = device
        self.settings = settings
        self.cycles = 0
        self.sleep_ms = 0.0
        self.exposed = 0
        self.host_bound = 0
        self.trials = 0
        self.host_ms: list[float] = []
        self.launch_ms: float | None = None

    def calibrate(self) -> None:
        """The spin for this callable, in ms and cycles."""
        self.launch_ms = sorted(self.host_ms)[len(self.host_ms) // 2] if self.host_ms else None
        cap = max(0.05, float(self.settings.spin_max_ms))
        self.sleep_ms = min(cap, max(0.05, 3.0 * (self.launch_ms or 0.05)))
        per_ms = float(self.settings.spin_cycles_per_ms) or spin_cycles_per_ms(self.device)
        self.cycles = max(1000, int(per_ms * self.sleep_ms))

    def info(self) -> dict[str, Any]:
        return {"launch_sleep_ms": round(self.sleep_ms, 4),
            "launch_host_ms": round(self.launch_ms, 5) if self.launch_ms is not None else None,
            "launch_exposed": self.exposed, "launch_host_bound": self.host_bound,
            "launch_hidden_trials": self.trials}


class _HostPacing:
    """Which unhidden ``cuda_events`` trials the host paced. Without launch hiding the start event fires as
    soon as it is recorded (the device is idle after the synchronise before each trial), so a call whose
    kernels the GPU runs faster than the host issues them ends a little after its last launch: its event
    time is the host's issue time plus the last kernel, and its host issue time (start event, the call, end
    event) is then close to its event time. A trial counts as host-paced when its issue time is at least
    :data:`HOST_PACED_SHARE` of its event time (``launch_unhidden_host_bound`` of ``launch_unhidden_trials``
    in the timing info; read by :func:`..device.host_bound_callables`).

    Until this count (H200 session 29) a candidate timed without hiding (one that ran kernels on several
    streams when profiled) could never be called host-bound: L3/29's candidate took 6.69 ms in one process
    and 15.22 ms in the next, its profiled kernels summing to 8.2 and 6.9 ms, and neither was flagged."""

    def __init__(self) -> None:
        self.trials = 0
        self.paced = 0
        self.shares: list[float] = []

    def count(self, host_ms: float, event_ms: float) -> None:
        """One trial: the host's issue time and the event time, both in ms."""
        self.trials += 1
        if event_ms <= 0:  # no device time to speak of: the host's issue time is the call's time
            self.paced += 1
            return
        share = host_ms / event_ms
        self.shares.append(share)  # finite only: the share's median is stored as JSON
        if share >= HOST_PACED_SHARE:
            self.paced += 1

    def info(self) -> dict[str, Any]:
        shares = sorted(self.shares)
        return {"launch_unhidden_trials": self.trials, "launch_unhidden_host_bound": self.paced,
                "launch_host_share": round(shares[len(shares) // 2], 4) if shares else None}


#: an unhidden trial whose host issue time is at least this share of its event time was paced by the host
#: (:class:`_HostPacing`): the GPU waited for launches, or all but did
HOST_PACED_SHARE = 0.9


def _timed_loop(fn: Callable[[int], Any], device: torch.device, settings: TimerSettings, timer: str,
                flush: "_Flusher | None", between: Callable[[], None] | None, index0: int,
                hide: "_LaunchHider | None" = None, keep_last: bool = False,
                paced: "_HostPacing | None" = None) -> dict[str, Any]:
    """Warm-up, then timed trials numbered from ``index0`` until ``settings`` says stop. Returns the raw
    ``samples`` and ``synced`` (ms), ``stopped``, ``elapsed_s``, ``warmup_calls``, ``warmup_s`` and, with
    ``keep_last``, ``last`` (the last call's return value; otherwise no output outlives its call here)."""
    is_cuda = device.type == "cuda"
    ret: Any = None

    def call(i: int) -> None:
        """``fn(i)``; its output is kept (``ret``) only with ``keep_last``, else freed on return."""
        nonlocal ret
        out = fn(i)
        if keep_last:
            ret = out

    w0 = _perf_counter_ns()
    for i in range(settings.warmup):
        if hide is not None and not hide.cycles:
            _synchronize(device)
            h0 = _perf_counter_ns()
            fn(index0 + i)
            hide.host_ms.append((_perf_counter_ns() - h0) / 1e6)  # the host's launch time, GPU idle
        else:
            fn(index0 + i)
    i = settings.warmup
    if is_cuda:
        _synchronize(device)
    # time-based warm-up: the timed loop's rhythm (flush, call, synchronise) until warmup_ms have passed
    while settings.warmup_ms > 0 and (_perf_counter_ns() - w0) / 1e6 < settings.warmup_ms:
        if flush is not None:
            flush()
        fn(index0 + i)
        i += 1
        if is_cuda:
            _synchronize(device)
    warmup_calls, warmup_s = i, (_perf_counter_ns() - w0) / 1e9
    if hide is not None and not hide.cycles:
        hide.calibrate()  # after the time-based warm-up: the spin's cycles per ms at the clocks timing sees
    samples: list[float] = []
    synced: list[float] = []
    t0 = _perf_counter_ns()
    stopped = "fixed"
    i = index0  # the timed trials are numbered on from index0 (callers rotate input sets by it)
    target_n = settings.trials + (1 if settings.discard_first else 0)
    while True:
        if between is not None:
            between()
        if timer == "cuda_events":
            flush()  # type: ignore[misc]
            _synchronize(device)
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            if hide is not None:
                pre = _Event(enable_timing=True)
                hp = _perf_counter_ns()
                _record(pre)
                _sleep(hide.cycles)  # type: ignore[misc]  # the GPU is busy while the host launches
            h0 = _perf_counter_ns()
            _record(start)
            call(i)
            _record(end)
            hl = _perf_counter_ns()
            _synchronize(device)  # every stream, so side-stream work ends inside the host interval
            h1 = _perf_counter_ns()
            event_ms = _elapsed_time(start, end)
            # the trial time_callable drops (discard_first: each segment's first) is in no count either
            counted = not (settings.discard_first and not samples)
            if hide is not None:
                host_ms = (hl - h0) / 1e6  # the host's time to issue the call (its own work included)
                if counted:
                    hide.trials += 1
                    if host_ms > hide.sleep_ms:  # launched after the spin ended: the gap counts
                        hide.exposed += 1
                    if host_ms > event_ms:
                        hide.host_bound += 1
                samples.append(max(event_ms, host_ms))
                # host time from when the spin ended (its start plus its GPU length) until the device is idle
                synced.append(max(0.0, (h1 - hp) / 1e6 - _elapsed_time(pre, start)))
            else:
                samples.append(event_ms)
                synced.append((h1 - h0) / 1e6)
                if paced is not None and counted:
                    paced.count((hl - h0) / 1e6, event_ms)
        else:
            h0 = _perf_counter_ns()
            call(i)
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
    return {"samples": samples, "synced": synced, "stopped": stopped, "last": ret,
            "elapsed_s": (_perf_counter_ns() - t0) / 1e9, "warmup_calls": warmup_calls, "warmup_s": warmup_s}


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
