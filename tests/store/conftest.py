"""Store fixtures: an SQLite file per test, and a private schema on a real PostgreSQL server.

PostgreSQL is the server at ``$KBENCH_TEST_PG_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``). When nothing answers there and Debian's
``postgresql`` package is installed, the session starts a throwaway server from it (``initdb`` +
``pg_ctl`` on a free port, as the ``postgres`` user when run as root) and stops it at the end. Each
test gets a fresh schema that is dropped afterwards. Tests that need PostgreSQL are skipped when
neither works.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator

import pytest

PG_URL = os.environ.get("KBENCH_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _connect(url: str):  # type: ignore[no-untyped-def]
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return psycopg.connect(host=u.host or "127.0.0.1", port=u.port or 5432, user=u.username, dbname=u.database,
                           password=u.password, connect_timeout=3, autocommit=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_local_server() -> tuple[str, list[str], str] | None:
    """Start a throwaway PostgreSQL from Debian's package; (url, stop command, data dir) or None."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not bins:
        return None
    bindir = os.path.dirname(bins[-1])
    as_user: list[str] = []
    root = tempfile.mkdtemp(prefix="kbench-pg-")
    if os.geteuid() == 0:  # initdb refuses to run as root
        if shutil.which("runuser") is None:
            return None
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    data, port = os.path.join(root, "data"), _free_port()
    try:
        subprocess.run([*as_user, f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        subprocess.run([*as_user, f"{bindir}/pg_ctl", "-D", data, "-l", os.path.join(root, "log"), "-w", "-t", "60",
                        "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                       check=True, capture_output=True, timeout=120)
    except (subprocess.SubprocessError, OSError):
        shutil.rmtree(root, ignore_errors=True)
        return None
    stop = [*as_user, f"{bindir}/pg_ctl", "-D", data, "-m", "fast", "-w", "stop"]
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres", stop, root


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """URL of a reachable PostgreSQL database (the configured one, or a throwaway local server)."""
    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed")
    try:
        _connect(PG_URL).close()
        yield PG_URL
        return
    except psycopg.OperationalError as e:
        first_error = e
    started = _start_local_server()
    if started is None:
        pytest.skip(f"PostgreSQL not reachable at {PG_URL} ({first_error}) and none could be started")
    url, stop, root = started
    try:
        yield url
    finally:
        subprocess.run(stop, capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A store URL whose search path is a fresh schema on the PostgreSQL server (dropped afterwards)."""
    conn = _connect(pg_server)
    schema = f"kbench_test_{uuid.uuid4().hex[:12]}"
    conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in pg_server else "?"
    try:
        yield f"{pg_server}{sep}options=-csearch_path%3D{schema}"
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
