"""SQLAlchemy table definitions of the results store (the schema at alembic head).

Tables (one row of each means):

- ``runs``: one ``kbench run`` (model, protocol, config, hardware fingerprint, status, the process that runs
  it and its heartbeat).
- ``problems``: one problem source text, deduplicated by its SHA-256 (the same code in two runs or
  two problem sets is stored once; baselines are keyed by this hash).
- ``run_problems``: a run's scope: which problems (level, problem_id, name) it covers, with the
  problem audit's flags (``degenerate`` ...). ``fast_p`` is computed over this scope.
- ``samples``: one independent attempt (what pass@k counts) by one model at one problem of a run.
- ``attempts``: one turn of a sample: prompt messages, reply, extracted code, tokens, cost.
- ``results``: the verdict of one attempt: every :class:`~kernelbench_harness.core.EvalResult`
  field as a column plus the full result as JSON.
- ``timings``: timing statistics and raw trial times (ms) of a result's candidate.
- ``baselines``: eager / torch.compile timings keyed by problem hash x hardware x software x
  protocol x precision x mode.

Changing this file needs a new migration in ``migrations/versions/``; a test checks that the
migrated schema matches these models.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "AttemptRow",
    "Base",
    "BaselineRow",
    "ProblemRow",
    "ResultRow",
    "RunProblemRow",
    "RunRow",
    "SampleRow",
    "TimingRow",
]


class Base(DeclarativeBase):
    """Declarative base of the store's tables."""

    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        datetime: DateTime(timezone=True),
    }


class RunRow(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_name: Mapped[str] = mapped_column(String(200), unique=True)
    model: Mapped[str] = mapped_column(String(300))
    status: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    protocol_name: Mapped[str] = mapped_column(String(50))
    precision: Mapped[str] = mapped_column(String(10))
    protocol_fingerprint: Mapped[str] = mapped_column(String(64))
    hardware_fingerprint: Mapped[str] = mapped_column(String(64))
    protocol: Mapped[dict[str, Any]]
    config: Mapped[dict[str, Any]]
    hardware: Mapped[dict[str, Any]]
    kbench_version: Mapped[str] = mapped_column(String(50))
    # added in revision 0003: the process that runs (or last ran) the run, and its last heartbeat (see
    # store/liveness.py); None in runs started before
    runner_host: Mapped[str | None] = mapped_column(String(255))
    runner_pid: Mapped[int | None]
    runner_start: Mapped[str | None] = mapped_column(String(200))
    heartbeat_at: Mapped[datetime | None]


class ProblemRow(Base):
    __tablename__ = "problems"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    code_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    code: Mapped[str] = mapped_column(Text)


class RunProblemRow(Base):
    __tablename__ = "run_problems"
    __table_args__ = (UniqueConstraint("run_id", "level", "problem_id", name="uq_run_problems_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    problem_pk: Mapped[int] = mapped_column(ForeignKey("problems.id"))
    level: Mapped[int]
    problem_id: Mapped[int]
    name: Mapped[str] = mapped_column(String(300))
    source: Mapped[str] = mapped_column(Text)
    # added in revision 0002: the problem audit's flags ("degenerate", ...), a JSON list
    flags: Mapped[list[Any] | None]


class SampleRow(Base):
    __tablename__ = "samples"
    __table_args__ = (
        UniqueConstraint("run_id", "level", "problem_id", "model", "sample_id", name="uq_samples_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    problem_pk: Mapped[int] = mapped_column(ForeignKey("problems.id"))
    level: Mapped[int]
    problem_id: Mapped[int]
    model: Mapped[str] = mapped_column(String(300))
    sample_id: Mapped[int]
    created_at: Mapped[datetime]


class AttemptRow(Base):
    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("sample_pk", "turn", name="uq_attempts_turn"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sample_pk: Mapped[int] = mapped_column(ForeignKey("samples.id", ondelete="CASCADE"), index=True)
    turn: Mapped[int]
    messages: Mapped[list[Any] | None]
    reply: Mapped[str | None] = mapped_column(Text)
    code: Mapped[str | None] = mapped_column(Text)
    code_sha256: Mapped[str | None] = mapped_column(String(64))
    backend: Mapped[str] = mapped_column(String(20))
    generation_model: Mapped[str | None] = mapped_column(String(300))
    input_tokens: Mapped[int | None]
    output_tokens: Mapped[int | None]
    cached_tokens: Mapped[int | None]
    reasoning_tokens: Mapped[int | None]
    cost_usd: Mapped[float | None] = mapped_column(Double)
    latency_s: Mapped[float | None] = mapped_column(Double)
    generation_error: Mapped[str | None] = mapped_column(Text)
    generation_error_kind: Mapped[str | None] = mapped_column(String(30))
    generation_requests: Mapped[int | None]
    created_at: Mapped[datetime]


class ResultRow(Base):
    __tablename__ = "results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_pk: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"), unique=True)
    outcome: Mapped[str] = mapped_column(String(30), index=True)
    tag: Mapped[str] = mapped_column(String(60))
    compiled: Mapped[bool] = mapped_column(Boolean)
    correct: Mapped[bool] = mapped_column(Boolean)
    has_speedup: Mapped[bool] = mapped_column(Boolean)
    max_abs_err: Mapped[float | None] = mapped_column(Double)
    max_rel_err: Mapped[float | None] = mapped_column(Double)
    allclose_kernelbench: Mapped[bool | None] = mapped_column(Boolean)
    candidate_ms: Mapped[float | None] = mapped_column(Double)
    eager_ms: Mapped[float | None] = mapped_column(Double)
    compile_ms: Mapped[float | None] = mapped_column(Double)
    speedup_eager: Mapped[float | None] = mapped_column(Double)
    speedup_compile: Mapped[float | None] = mapped_column(Double)
    baseline_id: Mapped[int | None]
    findings: Mapped[list[Any]]
    error: Mapped[str] = mapped_column(Text)
    log: Mapped[str] = mapped_column(Text)
    phase_s: Mapped[dict[str, Any]]
    device: Mapped[str] = mapped_column(String(50))
    extra: Mapped[dict[str, Any]]
    result: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class TimingRow(Base):
    __tablename__ = "timings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    result_pk: Mapped[int] = mapped_column(ForeignKey("results.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(30))
    timer: Mapped[str] = mapped_column(String(30))
    statistic: Mapped[str] = mapped_column(String(10))
    n: Mapped[int]
    value_ms: Mapped[float] = mapped_column(Double)
    median_ms: Mapped[float] = mapped_column(Double)
    mean_ms: Mapped[float] = mapped_column(Double)
    std_ms: Mapped[float] = mapped_column(Double)
    min_ms: Mapped[float] = mapped_column(Double)
    max_ms: Mapped[float] = mapped_column(Double)
    ci95_low_ms: Mapped[float] = mapped_column(Double)
    ci95_high_ms: Mapped[float] = mapped_column(Double)
    samples_ms: Mapped[list[Any]]


class BaselineRow(Base):
    __tablename__ = "baselines"
    __table_args__ = (
        Index(
            "ix_baselines_key",
            "problem_sha256",
            "hardware_fingerprint",
            "software_fingerprint",
            "protocol_fingerprint",
            "precision",
            "mode",
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    problem_pk: Mapped[int] = mapped_column(ForeignKey("problems.id"))
    problem_sha256: Mapped[str] = mapped_column(String(64))
    level: Mapped[int]
    problem_id: Mapped[int]
    name: Mapped[str] = mapped_column(String(300))
    hardware_fingerprint: Mapped[str] = mapped_column(String(200))
    software_fingerprint: Mapped[str] = mapped_column(String(200))
    protocol_fingerprint: Mapped[str] = mapped_column(String(200))
    precision: Mapped[str] = mapped_column(String(10))
    mode: Mapped[str] = mapped_column(String(80))
    timer: Mapped[str] = mapped_column(String(30))
    statistic: Mapped[str] = mapped_column(String(10))
    n: Mapped[int]
    value_ms: Mapped[float] = mapped_column(Double)
    median_ms: Mapped[float] = mapped_column(Double)
    mean_ms: Mapped[float] = mapped_column(Double)
    std_ms: Mapped[float] = mapped_column(Double)
    min_ms: Mapped[float] = mapped_column(Double)
    max_ms: Mapped[float] = mapped_column(Double)
    ci95_low_ms: Mapped[float] = mapped_column(Double)
    ci95_high_ms: Mapped[float] = mapped_column(Double)
    samples_ms: Mapped[list[Any]]
    hardware: Mapped[dict[str, Any]]
    measured_here: Mapped[bool] = mapped_column(Boolean)
    source: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime]
