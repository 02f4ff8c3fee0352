"""Store fixtures: an SQLite file per test, and a private schema on the real PostgreSQL server.

PostgreSQL is reached at ``$KBENCH_TEST_PG_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``); each test gets a fresh schema that is dropped
afterwards. Tests that need it are skipped when the server does not answer.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

PG_URL = os.environ.get("KBENCH_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _pg_admin():  # type: ignore[no-untyped-def]
    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed")
    from sqlalchemy.engine import make_url

    u = make_url(PG_URL)
    try:
        return psycopg.connect(
            host=u.host or "127.0.0.1",
            port=u.port or 5432,
            user=u.username,
            dbname=u.database,
            password=u.password,
            connect_timeout=3,
            autocommit=True,
        )
    except psycopg.OperationalError as e:
        pytest.skip(f"PostgreSQL not reachable at {PG_URL}: {e}")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A store URL whose search path is a fresh schema on the PostgreSQL server (dropped afterwards)."""
    conn = _pg_admin()
    schema = f"kbench_test_{uuid.uuid4().hex[:12]}"
    conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        conn.close()


@pytest.fixture
def sqlite_url(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return f"sqlite:///{tmp_path / 'kbench.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request) -> str:  # type: ignore[no-untyped-def]
    """The same test on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("pg_url")
