"""The results store: SQLAlchemy models, alembic migrations and the :class:`Store` API.

>>> store = Store()                                   # sqlite:///results/kbench.db
>>> store = Store("postgresql+psycopg://kbench@db-host/kbench")
"""

from __future__ import annotations

from .api import (
    DEFAULT_DB_URL,
    RESULT_COLUMNS,
    AttemptRecord,
    BaselineRecord,
    RunInfo,
    RunStatus,
    Store,
    normalize_db_url,
    upgrade_schema,
)

__all__ = [
    "DEFAULT_DB_URL",
    "RESULT_COLUMNS",
    "AttemptRecord",
    "BaselineRecord",
    "RunInfo",
    "RunStatus",
    "Store",
    "normalize_db_url",
    "upgrade_schema",
]
