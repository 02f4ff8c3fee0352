"""Core value types shared by every stage: problems, candidates, findings, timings and results.

All are frozen dataclasses that round-trip through plain JSON (``to_dict`` / ``from_dict``), because
results cross process boundaries (the candidate worker, the device worker, Ray) and land in the store.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "LAUNCH_BOUND_US",
    "Backend",
    "Outcome",
    "Severity",
    "Problem",
    "Candidate",
    "Finding",
    "TimingStats",
    "EvalResult",
    "sha256_text",
]

# An eager time under this many microseconds mostly measures kernel-launch overhead (PROTOCOLS.md
# section 6: v0's ReLU at 6.8 us, softmax at 13 us on an H200): the audit flags such problems and the
# reports mark them. One threshold for both.
LAUNCH_BOUND_US = 20.0


def sha256_text(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Backend(StrEnum):
    """How a candidate implements its kernels (detected from its source; see ``detect_backend``)."""

    CUDA = "cuda"  # CUDA C++ through torch.utils.cpp_extension.load_inline
    TRITON = "triton"  # @triton.jit kernels
    CPP = "cpp"  # C++ (no CUDA) through load_inline
    TORCH = "torch"  # no custom kernel found
    OTHER = "other"

    @staticmethod
    def detect(source: str) -> "Backend":
        """Guess the backend of candidate ``source`` from what it imports and compiles."""
        if "triton" in source and ("triton.jit" in source or "@jit" in source):
            return Backend.TRITON
        if "load_inline" in source or "cpp_extension" in source:
            if "cuda_sources" in source or "__global__" in source:
                return Backend.CUDA
            return Backend.CPP
        return Backend.TORCH


class Outcome(StrEnum):
    """Verdict on one evaluated candidate (EXPLOITS.md's vocabulary).

    ``cheat``, ``timing_invalid`` and ``policy`` carry a tag in :attr:`EvalResult.tag`.
    Only ``correct`` (and ``policy`` when the run allows the tagged practice) yields a speedup.
    """

    CORRECT = "correct"
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    OOM = "oom"
    CHEAT = "cheat"
    TIMING_INVALID = "timing_invalid"
    POLICY = "policy"
    NO_CODE = "no_code"  # the model's reply held no code to evaluate
    GENERATION_ERROR = "generation_error"  # the model could not be reached after retries

    @property
    def passed(self) -> bool:
        """True for outcomes whose outputs matched the reference (speedup may still be void)."""
        return self in (Outcome.CORRECT, Outcome.POLICY, Outcome.TIMING_INVALID)


class Severity(StrEnum):
    """How a guard finding affects the verdict."""

    INFO = "info"  # recorded only
    WARN = "warn"  # shown in reports (e.g. speedup > 10x marked for review)
    POLICY = "policy"  # allowed or not by the run's policy; speedup kept and marked
    TIMING = "timing"  # time not trustworthy: timing_invalid
    CHEAT = "cheat"  # result void


@dataclass(frozen=True, slots=True)
class Problem:
    """One KernelBench-format problem.

    Attributes:
        level: KernelBench level (1-4; the bundled suite uses 1-3).
        problem_id: 1-based id within the level (the number before ``_`` in the file name).
        name: file stem without the id, e.g. ``"Square_matrix_multiplication_"``.
        code: the full Python source defining ``Model``, ``get_inputs``, ``get_init_inputs``.
        source: where it came from (a path, ``hf:<dataset>``, ``bundled``).
        code_sha256: SHA-256 of ``code`` (baselines are keyed by it).
    """

    level: int
    problem_id: int
    name: str
    code: str
    source: str = ""
    code_sha256: str = ""

    def __post_init__(self) -> None:
        if not self.code_sha256:
            object.__setattr__(self, "code_sha256", sha256_text(self.code))

    @property
    def key(self) -> str:
        """``"L{level}/{problem_id}"``, unique inside one problem set."""
        return f"L{self.level}/{self.problem_id}"

    @property
    def file_name(self) -> str:
        """KernelBench's file name, ``"{problem_id}_{name}.py"`` (used by baseline JSON files)."""
        return f"{self.problem_id}_{self.name}.py"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Problem":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


@dataclass(frozen=True, slots=True)
class Candidate:
    """A candidate solution: Python source defining ``ModelNew``.

    Attributes:
        level, problem_id: the problem it answers.
        source: Python source (may be empty when the reply held no code).
        backend: detected kernel backend.
        sample_id: independent attempt index (what pass@k counts), as given by the source.
        turn: refinement step inside the sample, from 0.
        model: the model that wrote it (adapter's name).
    """

    level: int
    problem_id: int
    source: str
    backend: Backend = Backend.OTHER
    sample_id: int = 0
    turn: int = 0
    model: str = ""

    @property
    def source_sha256(self) -> str:
        return sha256_text(self.source)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["backend"] = str(self.backend)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Candidate":
        kw = {f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d}
        kw["backend"] = Backend(kw.get("backend", "other"))
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class Finding:
    """Evidence from one check (static analysis, runtime guard, verifier, timer).

    Attributes:
        check: the check's name, e.g. ``"static.reference-call"``, ``"runtime.input-mutation"``.
        severity: how it affects the verdict.
        tag: the verdict tag it supports (``"input-mutation"``, ``"side-stream"``...), or "".
        message: what the check saw, for people.
        data: machine-readable evidence (line numbers, max errors, counts).
    """

    check: str
    severity: Severity
    tag: str = ""
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "severity": str(self.severity), "tag": self.tag,
                "message": self.message, "data": self.data}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        return cls(check=d["check"], severity=Severity(d["severity"]), tag=d.get("tag", ""),
                   message=d.get("message", ""), data=dict(d.get("data") or {}))


@dataclass(frozen=True, slots=True)
class TimingStats:
    """Summary of repeated timings of one callable, all in milliseconds.

    Attributes:
        median_ms, mean_ms, std_ms, min_ms, max_ms: statistics of ``samples_ms``.
        ci95_low_ms, ci95_high_ms: 95% confidence interval of the median (order statistics).
        n: number of timed trials.
        samples_ms: every raw trial time, in the order taken.
        timer: ``"cuda_events"``, ``"profiler"`` or ``"wall"``.
        statistic: the protocol's headline statistic (``"median"`` or ``"mean"``).
    """

    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    ci95_low_ms: float
    ci95_high_ms: float
    n: int
    samples_ms: tuple[float, ...] = ()
    timer: str = "wall"
    statistic: str = "median"

    @property
    def value_ms(self) -> float:
        """The protocol's headline time: the mean or the median."""
        return self.mean_ms if self.statistic == "mean" else self.median_ms

    @property
    def ci_rel_halfwidth(self) -> float:
        """Half-width of the median's 95% CI over the median (0.01 = +-1%)."""
        if self.median_ms <= 0:
            return float("inf")
        return (self.ci95_high_ms - self.ci95_low_ms) / 2.0 / self.median_ms

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["samples_ms"] = list(self.samples_ms)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "TimingStats | None":
        if not d:
            return None
        kw = {f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d}
        kw["samples_ms"] = tuple(kw.get("samples_ms") or ())
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class EvalResult:
    """The verdict and measurements for one candidate on one problem under one protocol.

    Attributes:
        outcome: the verdict (see :class:`Outcome`).
        tag: the cheat / timing_invalid / policy tag ("" otherwise).
        compiled: the candidate's module imported and its kernels built.
        correct: outputs matched the reference on every trial under the protocol's judge.
        max_abs_err, max_rel_err: largest errors over all trials against the judging reference
            (float64 reference under the ``kbench`` protocol), or None when not compared.
        allclose_kernelbench: KernelBench-style ``allclose`` verdict recorded beside (kbench protocol).
        candidate: timing of ``ModelNew.forward`` (None when not timed).
        eager_ms, compile_ms: baseline headline times (ms) used for the speedups; ``compile_ms``
            is torch.compile in the protocol's baseline mode.
        baseline_id: store id of the baseline measurement used, when any.
        findings: evidence from every check that fired.
        error: short error text (compile log tail, exception) for failures.
        log: longer log, trimmed.
        phase_s: seconds spent per phase (``build``, ``load``, ``verify``, ``time``...).
        device: device the candidate ran on (``"cuda:0"``, ``"cpu"``).
    """

    outcome: Outcome
    tag: str = ""
    compiled: bool = False
    correct: bool = False
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    allclose_kernelbench: bool | None = None
    candidate: TimingStats | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    baseline_id: int | None = None
    findings: tuple[Finding, ...] = ()
    error: str = ""
    log: str = ""
    phase_s: dict[str, float] = field(default_factory=dict)
    device: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def candidate_ms(self) -> float | None:
        """Headline candidate time in ms (protocol statistic), or None when not timed."""
        return self.candidate.value_ms if self.candidate else None

    @property
    def has_speedup(self) -> bool:
        """Speedups are reported only for correct candidates (and allowed policy marks)."""
        if self.outcome is Outcome.CORRECT:
            return True
        return self.outcome is Outcome.POLICY and bool(self.extra.get("policy_allowed", False))

    @property
    def speedup_eager(self) -> float | None:
        """``eager_ms / candidate_ms`` (KernelBench's definition), None unless :attr:`has_speedup`."""
        return _ratio(self.eager_ms, self.candidate_ms) if self.has_speedup else None

    @property
    def speedup_compile(self) -> float | None:
        """``compile_ms / candidate_ms`` against torch.compile, None unless :attr:`has_speedup`."""
        return _ratio(self.compile_ms, self.candidate_ms) if self.has_speedup else None

    def with_(self, **changes: Any) -> "EvalResult":
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": str(self.outcome),
            "tag": self.tag,
            "compiled": self.compiled,
            "correct": self.correct,
            "max_abs_err": self.max_abs_err,
            "max_rel_err": self.max_rel_err,
            "allclose_kernelbench": self.allclose_kernelbench,
            "candidate": self.candidate.to_dict() if self.candidate else None,
            "eager_ms": self.eager_ms,
            "compile_ms": self.compile_ms,
            "baseline_id": self.baseline_id,
            "findings": [f.to_dict() for f in self.findings],
            "error": self.error,
            "log": self.log,
            "phase_s": dict(self.phase_s),
            "device": self.device,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EvalResult":
        return cls(
            outcome=Outcome(d["outcome"]),
            tag=d.get("tag", ""),
            compiled=bool(d.get("compiled", False)),
            correct=bool(d.get("correct", False)),
            max_abs_err=d.get("max_abs_err"),
            max_rel_err=d.get("max_rel_err"),
            allclose_kernelbench=d.get("allclose_kernelbench"),
            candidate=TimingStats.from_dict(d.get("candidate")),
            eager_ms=d.get("eager_ms"),
            compile_ms=d.get("compile_ms"),
            baseline_id=d.get("baseline_id"),
            findings=tuple(Finding.from_dict(f) for f in d.get("findings") or ()),
            error=d.get("error", ""),
            log=d.get("log", ""),
            phase_s=dict(d.get("phase_s") or {}),
            device=d.get("device", ""),
            extra=dict(d.get("extra") or {}),
        )


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den
