"""The process that runs a run and its heartbeat (``runs.runner_host``, ``runner_pid``, ``runner_start``,
``heartbeat_at``), so that a run whose runner was killed reads as interrupted and a second runner is refused.

Runs stored before have none: a ``running`` one among them reads as interrupted (see store/liveness.py).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("runner_host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("runner_pid", sa.Integer, nullable=True))
        batch.add_column(sa.Column("runner_start", sa.String(200), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        for col in ("heartbeat_at", "runner_start", "runner_pid", "runner_host"):
            batch.drop_column(col)
