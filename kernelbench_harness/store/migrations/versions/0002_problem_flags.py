"""Problem audit flags in a run's scope (``run_problems.flags``, a JSON list such as ["degenerate"]).

Revision ID: 0002
Revises: 0001
Create Date: 2026-03-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run_problems") as batch:
        batch.add_column(sa.Column("flags", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run_problems") as batch:
        batch.drop_column("flags")
