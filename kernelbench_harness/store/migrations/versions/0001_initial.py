"""Initial schema: runs, problems, run_problems, samples, attempts, results, timings, baselines.

Revision ID: 0001
Revises:
Create Date: 2026-03-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def _stats_columns() -> list[sa.Column]:
    return [
        sa.Column("timer", sa.String(30), nullable=False),
        sa.Column("statistic", sa.String(10), nullable=False),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("value_ms", sa.Double, nullable=False),
        sa.Column("median_ms", sa.Double, nullable=False),
        sa.Column("mean_ms", sa.Double, nullable=False),
        sa.Column("std_ms", sa.Double, nullable=False),
        sa.Column("min_ms", sa.Double, nullable=False),
        sa.Column("max_ms", sa.Double, nullable=False),
        sa.Column("ci95_low_ms", sa.Double, nullable=False),
        sa.Column("ci95_high_ms", sa.Double, nullable=False),
        sa.Column("samples_ms", sa.JSON, nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_name", sa.String(200), nullable=False, unique=True),
        sa.Column("model", sa.String(300), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("finished_at", _TS, nullable=True),
        sa.Column("protocol_name", sa.String(50), nullable=False),
        sa.Column("precision", sa.String(10), nullable=False),
        sa.Column("protocol_fingerprint", sa.String(64), nullable=False),
        sa.Column("hardware_fingerprint", sa.String(64), nullable=False),
        sa.Column("protocol", sa.JSON, nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("hardware", sa.JSON, nullable=False),
        sa.Column("kbench_version", sa.String(50), nullable=False),
    )
    op.create_table(
        "problems",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("code_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("code", sa.Text, nullable=False),
    )
    op.create_table(
        "run_problems",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("problem_pk", sa.Integer, sa.ForeignKey("problems.id"), nullable=False),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("problem_id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(300), nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.UniqueConstraint("run_id", "level", "problem_id", name="uq_run_problems_key"),
    )
    op.create_index("ix_run_problems_run_id", "run_problems", ["run_id"])
    op.create_table(
        "samples",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("problem_pk", sa.Integer, sa.ForeignKey("problems.id"), nullable=False),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("problem_id", sa.Integer, nullable=False),
        sa.Column("model", sa.String(300), nullable=False),
        sa.Column("sample_id", sa.Integer, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.UniqueConstraint("run_id", "level", "problem_id", "model", "sample_id", name="uq_samples_key"),
    )
    op.create_index("ix_samples_run_id", "samples", ["run_id"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("sample_pk", sa.Integer, sa.ForeignKey("samples.id", ondelete="CASCADE"), nullable=False),
        sa.Column("turn", sa.Integer, nullable=False),
        sa.Column("messages", sa.JSON, nullable=True),
        sa.Column("reply", sa.Text, nullable=True),
        sa.Column("code", sa.Text, nullable=True),
        sa.Column("code_sha256", sa.String(64), nullable=True),
        sa.Column("backend", sa.String(20), nullable=False),
        sa.Column("generation_model", sa.String(300), nullable=True),
        sa.Column("input_tokens", sa.Integer, nullable=True),
        sa.Column("output_tokens", sa.Integer, nullable=True),
        sa.Column("cached_tokens", sa.Integer, nullable=True),
        sa.Column("reasoning_tokens", sa.Integer, nullable=True),
        sa.Column("cost_usd", sa.Double, nullable=True),
        sa.Column("latency_s", sa.Double, nullable=True),
        sa.Column("generation_error", sa.Text, nullable=True),
        sa.Column("generation_error_kind", sa.String(30), nullable=True),
        sa.Column("generation_requests", sa.Integer, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.UniqueConstraint("sample_pk", "turn", name="uq_attempts_turn"),
    )
    op.create_index("ix_attempts_sample_pk", "attempts", ["sample_pk"])
    op.create_table(
        "results",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "attempt_pk",
            sa.Integer,
            sa.ForeignKey("attempts.id", ondelete="CASCADE"),
            nullable=False,
            unique=True,
        ),
        sa.Column("outcome", sa.String(30), nullable=False),
        sa.Column("tag", sa.String(60), nullable=False),
        sa.Column("compiled", sa.Boolean, nullable=False),
        sa.Column("correct", sa.Boolean, nullable=False),
        sa.Column("has_speedup", sa.Boolean, nullable=False),
        sa.Column("max_abs_err", sa.Double, nullable=True),
        sa.Column("max_rel_err", sa.Double, nullable=True),
        sa.Column("allclose_kernelbench", sa.Boolean, nullable=True),
        sa.Column("candidate_ms", sa.Double, nullable=True),
        sa.Column("eager_ms", sa.Double, nullable=True),
        sa.Column("compile_ms", sa.Double, nullable=True),
        sa.Column("speedup_eager", sa.Double, nullable=True),
        sa.Column("speedup_compile", sa.Double, nullable=True),
        sa.Column("baseline_id", sa.Integer, nullable=True),
        sa.Column("findings", sa.JSON, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("log", sa.Text, nullable=False),
        sa.Column("phase_s", sa.JSON, nullable=False),
        sa.Column("device", sa.String(50), nullable=False),
        sa.Column("extra", sa.JSON, nullable=False),
        sa.Column("result", sa.JSON, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_index("ix_results_outcome", "results", ["outcome"])
    op.create_table(
        "timings",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("result_pk", sa.Integer, sa.ForeignKey("results.id", ondelete="CASCADE"), nullable=False),
        sa.Column("role", sa.String(30), nullable=False),
        *_stats_columns(),
    )
    op.create_index("ix_timings_result_pk", "timings", ["result_pk"])
    op.create_table(
        "baselines",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("problem_pk", sa.Integer, sa.ForeignKey("problems.id"), nullable=False),
        sa.Column("problem_sha256", sa.String(64), nullable=False),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("problem_id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(300), nullable=False),
        sa.Column("hardware_fingerprint", sa.String(200), nullable=False),
        sa.Column("software_fingerprint", sa.String(200), nullable=False),
        sa.Column("protocol_fingerprint", sa.String(200), nullable=False),
        sa.Column("precision", sa.String(10), nullable=False),
        sa.Column("mode", sa.String(80), nullable=False),
        *_stats_columns(),
        sa.Column("hardware", sa.JSON, nullable=False),
        sa.Column("measured_here", sa.Boolean, nullable=False),
        sa.Column("source", sa.String(200), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_index(
        "ix_baselines_key",
        "baselines",
        [
            "problem_sha256",
            "hardware_fingerprint",
            "software_fingerprint",
            "protocol_fingerprint",
            "precision",
            "mode",
        ],
    )


def downgrade() -> None:
    for table in (
        "baselines",
        "timings",
        "results",
        "attempts",
        "samples",
        "run_problems",
        "problems",
        "runs",
    ):
        op.drop_table(table)
