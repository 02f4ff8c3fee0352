"""Named, recorded evaluation protocols: everything that changes a number.

Three protocols ship (see PROTOCOLS.md for the sources):

- ``kbench`` (default): stricter than both others. Secret per-run seeds, several fresh input sets
  drawn by the trusted side, weights carried by ``state_dict``, inputs cloned for every call,
  correctness judged against a float64 evaluation of the reference with a bound derived from the
  PyTorch reference's own float64 error, CUDA events with an L2 flush sized from the device,
  adaptive trials until the median's 95% CI is within 1%, median statistic.
- ``kernelbench``: KernelBench main @ 423217d (PROTOCOLS.md section 2): 5 trials with seeds derived
  from 42, ``allclose`` atol=rtol=1e-4 (fp32) / 1e-2 (fp16, bf16), weights by reseeding 42, CUDA
  events with a 256 MiB flush, 3 warm-ups, 100 trials (+1 discarded), mean rounded to 3 significant
  figures, reference under ``no_grad`` and candidate with autograd on.
- ``cuda-agent``: CUDA Agent (arXiv 2602.24286, PROTOCOLS.md section 3): 5 fresh inputs,
  atol=rtol=1e-2, weights by ``load_state_dict``, ``torch.nn.functional`` forbidden in
  ``ModelNew.forward``, profiler device time over 10 iterations after 5 warm-ups, no L2 flush,
  same input every iteration.

A run stores ``Protocol.to_dict()``; results of different protocols never share a table column.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

__all__ = ["Tolerance", "Protocol", "PROTOCOL_NAMES", "PRECISIONS", "COMPILE_MODES", "get_protocol"]

PRECISIONS = ("fp32", "fp16", "bf16")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
PROTOCOL_NAMES = ("kbench", "kernelbench", "cuda-agent")


# settings added after protocols were first stored, with the value that reproduces what a stored
# protocol that lacks them did; left out of the fingerprints while they hold that value (so older
# stores keep their keys)
_ADDED_LATER: dict[str, Any] = {"warmup_ms": 0.0, "min_time_s": 0.0, "input_device": "cpu", "placements": 1,
                                "hide_launch": False, "hide_launch_max_ms": 0.5, "ablate_kernels": False,
                                "weights_device": "cpu", "min_custom_kernel_share": 0.0}
_ADDED_LATER_TIMING = ("warmup_ms", "min_time_s", "placements", "hide_launch", "hide_launch_max_ms")  # the ones that change a baseline's time


@dataclass(frozen=True, slots=True)
class Tolerance:
    """``allclose`` tolerances: ``|a - b| <= atol + rtol * |b|`` elementwise."""

    atol: float
    rtol: float


@dataclass(frozen=True)
class Protocol:
    """Every setting that changes a correctness verdict or a time.

    Attributes (grouped):
        name: ``kbench`` | ``kernelbench`` | ``cuda-agent``.
        precision: ``fp32`` | ``fp16`` | ``bf16``: floating inputs and weights are cast to it;
            integer and boolean inputs are never cast (kbench), or are cast (kernelbench, faithfully).

        correct_trials: number of correctness trials (fresh inputs each).
        seed_policy: ``secret`` (random per run, stored after the run) or ``fixed``.
        fixed_seed: base seed when ``seed_policy == "fixed"`` (KernelBench: 42).
        judge: ``allclose`` (against the reference at the run's precision) or ``fp64-bound``
            (against a float64 evaluation of the reference; bound derived from the PyTorch
            reference's own error: ``|c - r64| <= k * e_ref + floor_rel * max|r64|`` with
            ``e_ref = max |r32 - r64|``).
        tolerances: per precision, for ``allclose`` (and the KernelBench-style result recorded beside).
        fp64_multiple, fp64_floor_rel: ``k`` and ``floor_rel`` of the ``fp64-bound`` judge (see ``judge``). ``k = 64``: a naive sequential
            fp32 reduction over a long axis legitimately errs several times more than cuBLAS's blocked
            one (seen on an H200: a matrix-vector kernel at 30x PyTorch's own error, one element over
            a 16x bound), while TF32, fp16 and bf16 arithmetic err 1000x or more.
        weights: ``state_dict`` (copy the reference's parameters and buffers where names and shapes
            match) or ``reseed`` (KernelBench: ``torch.manual_seed(fixed_seed)`` before each constructor).
        clone_inputs: give the candidate a fresh clone of the inputs for every call.
        nan_policy: ``match`` (NaN/Inf allowed only where the reference has them) or ``fail`` (any NaN fails).
        check_dtype: the output dtype must equal the reference's.
        forbid_functional: every ``torch.nn.functional`` callable raises inside ``ModelNew.forward``.

        timer: ``cuda_events`` | ``profiler`` | ``wall`` (on a CPU device every protocol uses ``wall``).
        l2_flush: ``none`` | ``fixed`` (``l2_flush_bytes``) | ``device`` (max(2 x device L2, l2_flush_bytes)).
        warmup: warm-up calls before timing.
        warmup_ms: after the ``warmup`` calls, keep warming up (L2 flush, call, synchronise, as in the
            timed loop) until this many milliseconds of wall time have passed (0 = calls only). A GPU
            left idle drops its clocks, and a few calls of a short kernel end before they are back up.
        min_time_s: adaptive timing does not stop on the confidence interval before this many seconds
            of timed trials (0 = as soon as the interval is narrow enough), so a short kernel's median
            spans more than a few milliseconds of the machine's state.
        trials: timed trials (fixed), or the minimum when ``adaptive``.
        max_trials, target_ci_rel, time_budget_s: adaptive stopping: stop when the median's 95% CI
            half-width is within ``target_ci_rel`` of the median, at ``max_trials``, or after
            ``time_budget_s`` seconds of timing.
        discard_first: drop the first timed trial (KernelBench times 101 and drops one).
        statistic: ``median`` or ``mean``.
        round_sig: round reported times to this many significant figures (KernelBench: 3), or None.
        rotate_inputs: number of input sets cycled through during timing (1 = same input every call).
        placements: time every callable (candidate, eager, torch.compile) in this many segments, its
            input sets moved to new device memory before each segment after the first; the median is
            the mean of the segments' medians and its interval includes their spread (see
            :mod:`kernelbench_harness.execution.timing`). 1 = one placement (every protocol: on an H200
            the four placements of one eager baseline spread by a median 1.0% while two runs' eager
            times differed by a median 6.6% (p90 34%), differences launch latency explains; see
            ``hide_launch``).
        hide_launch: give the GPU a spin before each trial's start event so the call's kernels are
            queued when it fires; a trial's time is then the larger of the GPU's time for the call and
            the host's time to issue it, without the host's launch latency in between (cuda_events
            only; see :mod:`kernelbench_harness.execution.timing`). On in ``kbench`` (off in
            ``kernelbench`` and ``cuda-agent``, whose procedures it is not): on an H200, 20 level-1
            candidates timed in two runs gave speedups vs eager that differed by a median 0.09% with
            it and 7.3% without (``docs/gpu/2026-12-01-s8``), and the exploit suite's 27 verdicts
            stayed as expected. Work on another stream can run, untimed, during the spin, so a
            candidate seen using several streams is timed without it. A call the host cannot issue
            faster than the GPU runs it is timed at the host's pace, which repeats worse between
            processes (``extra["host_bound"]`` of a result; the counts behind it are in its timing info).
        hide_launch_max_ms: the longest spin (ms); it bounds the side-stream work a candidate could hide
            per call, and a call whose host needs longer has the gap counted.
        input_device: where the trusted side draws the input sets: ``cpu`` (``get_inputs()`` as it
            is, KernelBench's and CUDA Agent's way; the values depend on the CPU generator only) or
            ``device`` (tensors created on the run's GPU, then copied to the host: milliseconds
            instead of seconds for the multi-GB inputs of current KernelBench level 1; a
            ``get_inputs`` that fails there is drawn on the CPU). Either way every candidate gets
            the same values from the trusted side.
        weights_device: where the reference model (and the candidate's ``ModelNew``, in its own
            process) is built under the weights' seed: ``cpu`` (``Model(*get_init_inputs())`` on the
            host, then moved to the device: KernelBench's and CUDA Agent's way) or ``device`` (built
            inside ``torch.device(<the run's GPU>)``, so its parameters are drawn by the GPU's
            generator: PyTorch draws them on the host in one thread, about 25 s for the 2.1 billion
            weights of KernelBench's L3/2 on an H200's host). Both sides build the same way, so a
            ``ModelNew`` laid out as ``Model`` gets the same values either way (on the device they
            also depend on the GPU model: PyTorch sizes its random kernels by the SM count); a reference
            that cannot be built on the device is built on the host, and the candidate is told so.
        alternate_rounds: when a job measures baselines, time the candidate, eager and each
            torch.compile mode in this many interleaved blocks (candidate, eager, compile, candidate,
            ...; each block gets ``1/alternate_rounds`` of the trials and the time budget) and pool each
            one's samples, so drift of the machine (clocks, temperature, other load) touches all three
            alike. 1 = one block each, one after the other (the default: while baselines are timed
            the candidate's process is stopped, but GPU work it queued just before can still run).
            Cached baselines are not re-timed.
        candidate_no_grad: time the candidate under ``torch.no_grad`` (KernelBench: autograd on).
        reference_no_grad: run and time the reference under ``no_grad``.
        baseline_modes: torch.compile modes measured as baselines.
        compile_mode: the torch.compile mode behind the headline ``speedup_compile``.
        recheck_after_timing: re-check outputs on fresh inputs, in the same buffers, after timing.
        both_orders: run reference-then-candidate and candidate-then-reference orders.
        ablate_kernels: after the correctness trials, call the candidate once more with every Triton
            launch skipped, on values no call has seen, and judge that output on the trusted side: still
            correct means its kernels do not contribute (a launch on a scratch buffer beside a PyTorch
            computation; ``cheat(kernel-not-executed)``, EXPLOITS K-20 in substance). Candidates that call a
            compiled extension are not ablated (those calls cannot be skipped). Off in ``kernelbench``
            and ``cuda-agent``, whose procedures have no such check.

        allow_torch_ops: PyTorch ops beside custom kernels (KernelBench allows partial replacement).
        allow_vendor_libs: cuBLAS/cuDNN calls from the candidate's own code.
        allow_lower_precision: lower-precision math (fp16/bf16/TF32) inside an fp32 problem.
        min_custom_kernel_share: the least share of a profiled forward call's device time (on a GPU only:
            a CPU has no CUDA profile) that the candidate's own kernels (its ``@triton.jit`` and ``__global__``
            functions, by name) must take;
            a candidate otherwise correct below it is ``policy(torch-work)`` with no speedup (0 = recorded
            only). 0.01 in ``kbench``: a token kernel beside a PyTorch computation that does the work
            (and that may tell the kernel-ablation call apart) takes a fraction of a percent; 0 in
            ``kernelbench`` and ``cuda-agent``, whose procedures allow any mix. Needs the CUDA profiler:
            on a CPU, or when the profile has no device time, the share is not judged (see
            :mod:`kernelbench_harness.execution.kernelshare`).
        tf32: TF32 for matmul and cuDNN in the reference, the baselines and the candidate process:
            False (strict fp32: both off), True (both on), None (PyTorch's defaults, as KernelBench and
            CUDA Agent leave them: cuDNN convolutions in TF32, matmul not).
    """

    name: str = "kbench"
    precision: str = "fp32"
    # correctness
    correct_trials: int = 5
    seed_policy: str = "secret"
    fixed_seed: int = 42
    judge: str = "fp64-bound"
    tolerances: dict[str, Tolerance] = field(default_factory=lambda: {
        "fp32": Tolerance(1e-4, 1e-4), "fp16": Tolerance(1e-2, 1e-2), "bf16": Tolerance(1e-2, 1e-2)})
    fp64_multiple: float = 64.0
    fp64_floor_rel: float = 4e-6
    weights: str = "state_dict"
    clone_inputs: bool = True
    nan_policy: str = "match"
    check_dtype: bool = True
    forbid_functional: bool = False
    # timing
    timer: str = "cuda_events"
    l2_flush: str = "device"
    l2_flush_bytes: int = 256 * 1024 * 1024
    warmup: int = 5
    warmup_ms: float = 100.0
    trials: int = 20
    min_time_s: float = 0.25
    adaptive: bool = True
    max_trials: int = 2000
    target_ci_rel: float = 0.01
    time_budget_s: float = 4.0
    discard_first: bool = False
    statistic: str = "median"
    round_sig: int | None = None
    rotate_inputs: int = 3
    placements: int = 1
    hide_launch: bool = True
    hide_launch_max_ms: float = 0.5
    input_device: str = "device"
    weights_device: str = "device"
    alternate_rounds: int = 1
    candidate_no_grad: bool = True
    reference_no_grad: bool = True
    baseline_modes: tuple[str, ...] = ("default",)
    compile_mode: str = "default"
    recheck_after_timing: bool = True
    both_orders: bool = True
    ablate_kernels: bool = True
    # policy
    allow_torch_ops: bool = True
    allow_vendor_libs: bool = True
    allow_lower_precision: bool = False
    min_custom_kernel_share: float = 0.01
    tf32: bool | None = False

    @property
    def tolerance(self) -> Tolerance:
        """``allclose`` tolerance at this protocol's precision."""
        return self.tolerances[self.precision]

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["tolerances"] = {k: [v.atol, v.rtol] for k, v in self.tolerances.items()}
        d["baseline_modes"] = list(self.baseline_modes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Protocol":
        kw = {f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d}
        if "name" in d and "alternate_rounds" not in d:
            kw["alternate_rounds"] = 1  # stored before the field existed: nothing alternated
        for name, absent in _ADDED_LATER.items():
            if "name" in d and name not in d:
                kw[name] = absent  # stored before the field existed: what the protocol did then
        if "tolerances" in kw:
            kw["tolerances"] = {k: (v if isinstance(v, Tolerance) else Tolerance(*v)) for k, v in kw["tolerances"].items()}
        if "baseline_modes" in kw:
            kw["baseline_modes"] = tuple(kw["baseline_modes"])
        return cls(**kw)

    def fingerprint(self) -> str:
        """Short hash of every setting; baselines and results are keyed by it. Settings added later
        (``_ADDED_LATER``) count only when they differ from what a protocol stored before them did, so
        that protocol keeps its hash."""
        d = self.to_dict()
        for name, absent in _ADDED_LATER.items():
            if d.get(name) == absent:
                d.pop(name, None)
        blob = json.dumps(d, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def timing_fingerprint(self) -> str:
        """Hash of the settings that change a baseline's time (not the correctness judge)."""
        keys = ("precision", "timer", "l2_flush", "l2_flush_bytes", "warmup", "trials", "adaptive", "max_trials",
                "target_ci_rel", "discard_first", "statistic", "round_sig", "rotate_inputs", "reference_no_grad",
                "tf32", "alternate_rounds")
        d = {k: getattr(self, k) for k in keys}
        d.update({k: getattr(self, k) for k in _ADDED_LATER_TIMING if getattr(self, k) != _ADDED_LATER[k]})
        blob = json.dumps(d, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def setting_descriptions() -> dict[str, str]:
    """Each :class:`Protocol` setting's description, from the class docstring's ``Attributes`` section:
    the text up to the end of its first sentence, whitespace collapsed. A setting described only inside
    another's entry (``l2_flush_bytes`` in ``l2_flush``'s) gets a pointer to that entry."""
    doc = Protocol.__doc__ or ""
    body = doc.split("Attributes (grouped):", 1)[-1]
    names = set(Protocol.__dataclass_fields__)
    texts: dict[str, list[str]] = {}  # setting -> its entry's lines (settings described together share one list)
    current: list[str] | None = None
    for line in body.splitlines():
        m = re.match(r"^\s{8}(\w+(?:, \w+)*): (.*)$", line)
        if m and all(n.strip() in names for n in m.group(1).split(",")):
            current = [m.group(2).strip()]
            for k in m.group(1).split(","):
                texts[k.strip()] = current
        elif current is not None and line.startswith(" " * 12) and line.strip():
            current.append(line.strip())
        elif not line.strip():
            current = None
    out = {k: re.split(r"(?<=\.)\s", " ".join(v), maxsplit=1)[0] for k, v in texts.items()}
    for k in names - set(out):
        owner = next((o for o, v in texts.items() if f"``{k}``" in " ".join(v)), None)
        out[k] = f"see {owner}" if owner else ""
    return out


_BASE: dict[str, Protocol] = {
    "kbench": Protocol(),
    "kernelbench": Protocol(
        name="kernelbench",
        tf32=None,
        seed_policy="fixed",
        fixed_seed=42,
        judge="allclose",
        weights="reseed",
        clone_inputs=False,
        nan_policy="fail",
        check_dtype=False,
        timer="cuda_events",
        l2_flush="fixed",
        l2_flush_bytes=256 * 1024 * 1024,
        warmup=3,
        warmup_ms=0.0,  # KernelBench: 3 warm-up calls, no minimum time
        min_time_s=0.0,
        trials=100,  # + the discarded first one: 101 timed calls, 100 kept
        adaptive=False,
        max_trials=100,
        time_budget_s=1e9,
        discard_first=True,
        statistic="mean",
        round_sig=3,
        rotate_inputs=1,
        placements=1,
        hide_launch=False,  # KernelBench's events enclose the host's launch latency
        input_device="cpu",  # get_inputs() on the CPU, as KernelBench does
        weights_device="cpu",  # Model(*get_init_inputs()) on the CPU, then moved, as KernelBench does
        alternate_rounds=1,
        candidate_no_grad=False,
        reference_no_grad=True,
        recheck_after_timing=False,
        both_orders=False,
        ablate_kernels=False,
        allow_lower_precision=True,
        min_custom_kernel_share=0.0,  # recorded only
    ),
    "cuda-agent": Protocol(
        name="cuda-agent",
        tf32=None,
        seed_policy="secret",
        judge="allclose",
        tolerances={"fp32": Tolerance(1e-2, 1e-2), "fp16": Tolerance(1e-2, 1e-2), "bf16": Tolerance(1e-2, 1e-2)},
        weights="state_dict",
        clone_inputs=True,
        nan_policy="fail",
        check_dtype=False,
        forbid_functional=True,
        timer="profiler",
        l2_flush="none",
        warmup=5,
        warmup_ms=0.0,  # CUDA Agent: 5 warm-up calls, no minimum time
        min_time_s=0.0,
        trials=10,
        adaptive=False,
        max_trials=10,
        time_budget_s=1e9,
        statistic="mean",
        rotate_inputs=1,
        placements=1,
        hide_launch=False,
        input_device="cpu",
        weights_device="cpu",
        alternate_rounds=1,
        candidate_no_grad=True,
        recheck_after_timing=False,
        both_orders=False,
        ablate_kernels=False,
        allow_lower_precision=True,
        min_custom_kernel_share=0.0,  # recorded only
    ),
}


# values a protocol setting may take (``-P``), where it is one of a few names
_CHOICES: dict[str, tuple[Any, ...]] = {
    "timer": ("cuda_events", "profiler", "wall"), "l2_flush": ("device", "fixed", "none"),
    "judge": ("fp64-bound", "allclose"), "weights": ("state_dict", "reseed"), "nan_policy": ("match", "fail"),
    "seed_policy": ("secret", "fixed"), "statistic": ("median", "mean"), "input_device": ("device", "cpu"),
    "weights_device": ("device", "cpu"),
    "compile_mode": tuple(COMPILE_MODES),
}
# the range of a numeric setting, (least, most or None) (counts, times and sizes are never negative)
_RANGE: dict[str, tuple[float, float | None]] = {
    "correct_trials": (1, None), "fp64_multiple": (0, None), "fp64_floor_rel": (0, None),
    "l2_flush_bytes": (0, None), "warmup": (0, None), "warmup_ms": (0, None), "trials": (1, None),
    "min_time_s": (0, None), "max_trials": (1, None), "target_ci_rel": (0, None), "time_budget_s": (0, None),
    "rotate_inputs": (1, None), "alternate_rounds": (1, None), "hide_launch_max_ms": (0.05, None),
    "placements": (1, 64), "min_custom_kernel_share": (0, 1),
}


def _tolerances(value: Any, base: dict[str, Tolerance]) -> dict[str, Tolerance]:
    """``-P tolerances=...``: a mapping (or JSON text) precision -> ``[atol, rtol]`` over ``base``.

    Raises:
        ConfigError: not such a mapping, an unknown precision, or a tolerance that is negative or not finite.
    """
    example = "-P 'tolerances={\"fp32\": [1e-3, 1e-3]}'"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, dict) or not value:
        raise ConfigError("tolerances must map a precision to [atol, rtol]", fix=f"pass e.g. {example}")
    out = dict(base)
    for prec, tol in value.items():
        if prec not in PRECISIONS:
            raise ConfigError(f"tolerances for unknown precision {prec!r}", fix=f"use {', '.join(PRECISIONS)}")
        if isinstance(tol, Tolerance):
            tol = [tol.atol, tol.rtol]
        if not (isinstance(tol, (list, tuple)) and len(tol) == 2 and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0 for x in tol)):
            raise ConfigError(f"tolerances[{prec!r}] must be [atol, rtol], two finite numbers >= 0, not {tol!r}",
                              fix=f"pass e.g. {example}")
        out[prec] = Tolerance(float(tol[0]), float(tol[1]))
    return out


def get_protocol(name: str = "kbench", precision: str = "fp32", /, **overrides: Any) -> Protocol:
    """The named protocol at ``precision``, with optional field ``overrides``.

    ``tolerances`` may be given as a mapping (or its JSON text) from precision to ``[atol, rtol]``; the
    precisions it names replace the protocol's, the others stay.

    Raises:
        ConfigError: unknown protocol name, precision or field; ``name`` or ``precision`` among the
            overrides (they are chosen with ``--protocol`` and ``--precision``); a value of the wrong type,
            outside its choices or range, or not finite.
    """
    for key, flag in (("name", "--protocol"), ("precision", "--precision")):
        if key in overrides:
            raise ConfigError(f"{key} is not a setting to change with -P", fix=f"choose it with {flag}")
    if "tolerances" in overrides:
        overrides["tolerances"] = _tolerances(overrides["tolerances"], _BASE[name].tolerances if name in _BASE else {})
    if name not in _BASE:
        raise ConfigError(f"unknown protocol {name!r}", fix=f"use one of: {', '.join(PROTOCOL_NAMES)}")
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}", fix=f"use one of: {', '.join(PRECISIONS)}")
    fields = {f.name for f in dataclasses.fields(Protocol)}
    bad = set(overrides) - fields
    if bad:
        raise ConfigError(f"unknown protocol setting(s): {', '.join(sorted(bad))}",
                          fix="see `kbench protocols show` for the settings")
    for key, value in overrides.items():  # the type of the protocol's own value, and a value the harness knows
        have = getattr(_BASE[name], key)
        if key in ("tolerances", "baseline_modes", "round_sig", "tf32") or value is None and have is None:
            continue
        want = type(have)
        ok = (isinstance(value, bool) if want is bool else
              isinstance(value, (int, float)) and not isinstance(value, bool) if want is float else
              isinstance(value, int) and not isinstance(value, bool) if want is int else isinstance(value, want))
        if not ok:
            raise ConfigError(f"protocol setting {key} must be {want.__name__}, not {value!r}",
                              fix=f"pass e.g. -P {key}={str(have).lower() if want is bool else have}")
        if want is float and not math.isfinite(value):
            raise ConfigError(f"protocol setting {key} must be a finite number, not {value!r}",
                              fix=f"pass e.g. -P {key}={have}")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise ConfigError(f"protocol setting {key} must be one of {', '.join(map(str, _CHOICES[key]))}, "
                              f"not {value!r}", fix=f"pass e.g. -P {key}={_CHOICES[key][0]}")
        low, high = _RANGE.get(key, (None, None))
        if (low is not None and value < low) or (high is not None and value > high):
            within = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise ConfigError(f"protocol setting {key} must be {within}, not {value!r}",
                              fix=f"pass e.g. -P {key}={4 if key == 'placements' else have}")
    merged = dataclasses.replace(_BASE[name], **overrides)
    if merged.timer == "profiler" and (merged.placements > 1 or merged.hide_launch):
        raise ConfigError(f"the {name} protocol's profiler timer has no placements or launch hiding",
                          fix="leave placements at 1 and hide_launch false with it, or pick a protocol "
                              "timed with CUDA events (kbench, kernelbench)")
    for mode in overrides.get("baseline_modes", ()):
        if mode not in COMPILE_MODES:
            raise ConfigError(f"unknown torch.compile mode {mode!r}", fix=f"use one of: {', '.join(COMPILE_MODES)}")
    return dataclasses.replace(merged, precision=precision)
