"""Opening a store: which URLs are refused (and with what fix), and files that are not kbench stores."""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernelbench_harness.cli import cli
from kernelbench_harness.errors import ConfigError, PrerequisiteError, StoreError
from kernelbench_harness.store import Store, normalize_db_url, upgrade_schema


@pytest.mark.parametrize("url", ["mysql://u@db.example/kb", "mysql+pymysql://u:s3cret@db.example/kb",
                                 "oracle://u@db.example/kb", "mssql+pyodbc://u@dsn", "nosuchdb://x"])
def test_a_back_end_other_than_sqlite_or_postgresql_names_both_and_their_urls(url):
    """mysql:// (a back end kbench does not support) was refused with "pip install
    'kernelbench-harness[postgres]'" as the fix, as if only the PostgreSQL driver were missing."""
    with pytest.raises(ConfigError) as ex:
        Store(url)
    backend = url.split(":")[0].split("+")[0]
    assert f"unsupported database {backend!r}" in ex.value.message and "SQLite or PostgreSQL" in ex.value.message
    assert "s3cret" not in str(ex.value)
    assert "sqlite:///" in ex.value.fix and "postgresql://" in ex.value.fix and "pip" not in ex.value.fix


def test_the_cli_prints_the_supported_back_ends_for_a_mysql_url():
    res = CliRunner().invoke(cli, ["runs", "list", "--db", "mysql://u@db.example/kb"])
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
    assert "sqlite:///" in res.exception.fix and "postgresql://" in res.exception.fix
    assert "kernelbench-harness[postgres]" not in str(res.exception)


def test_a_missing_driver_of_a_supported_back_end_gets_its_own_pip_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg: ModuleNotFoundError
    with pytest.raises(PrerequisiteError) as ex:
        Store("postgresql://u@db.example/kb")
    assert "'psycopg'" in ex.value.message and ex.value.fix == "pip install 'kernelbench-harness[postgres]'"
    monkeypatch.setitem(sys.modules, "pg8000", None)
    with pytest.raises(PrerequisiteError) as ex:
        Store("postgresql+pg8000://u@db.example/kb")
    assert "'pg8000'" in ex.value.message
    assert ex.value.fix.startswith("pip install pg8000, or drop '+pg8000' from --db")
    assert "pip install 'kernelbench-harness[postgres]'" in ex.value.fix


def test_an_unknown_driver_name_and_the_postgres_spelling():
    with pytest.raises(ConfigError, match="unknown postgresql driver 'nosuch'"):
        Store("postgresql+nosuch://u@db.example/kb")
    assert normalize_db_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_db_url("postgres+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"


@pytest.mark.parametrize("url,sync", [
    ("postgresql+asyncpg://u:s3cret@db.example:5432/kb", "postgresql://u:***@db.example:5432/kb"),
    ("postgresql+psycopg_async://u@db.example/kb", "postgresql://u@db.example/kb"),
    ("postgres+asyncpg://u@db.example/kb", "postgresql://u@db.example/kb"),
    ("sqlite+aiosqlite:///results/x.db", "sqlite:///results/x.db"),
])
def test_an_asyncio_driver_is_refused_with_the_synchronous_url(tmp_path, monkeypatch, url, sync):
    """postgresql+asyncpg:// was taken as a driver to install (pip install asyncpg), and with it installed the
    synchronous engine could not use it; nothing may be created on the way (aiosqlite: no file)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as ex:
        Store(url)
    assert "is an asyncio driver" in ex.value.message and ex.value.fix == f"pass --db in its synchronous form: {sync}"
    assert "s3cret" not in str(ex.value)
    res = CliRunner().invoke(cli, ["run", "--db", url, "--level", "1", "--ids", "1", "--gpus", "cpu",
                                   "--display", "plain", "--no-report"])
    assert isinstance(res.exception, ConfigError) and "asyncio driver" in res.exception.message
    assert list(tmp_path.iterdir()) == []


def _foreign_db(path: Path) -> None:
    """Another program's SQLite file, in the default (rollback) journal mode."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO notes (body) VALUES ('keep me')")
    conn.close()


def _journal_mode(path: Path) -> str:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("opener", [Store, lambda url: Store(url, create=False), upgrade_schema])
def test_a_foreign_sqlite_file_is_refused_before_anything_writes_to_it(tmp_path, opener):
    """kbench refused another program's file only after its engine's first connection had switched the file to
    WAL (a write to the header, and -wal/-shm files left beside it)."""
    db = tmp_path / "other.db"
    _foreign_db(db)
    before = db.read_bytes()
    assert _journal_mode(db) == "delete"
    with pytest.raises(StoreError) as ex:
        opener(f"sqlite:///{db}")
    assert "not a kbench results database" in ex.value.message and "notes" in ex.value.message
    assert "--db" in ex.value.fix
    assert hashlib.sha256(db.read_bytes()).hexdigest() == hashlib.sha256(before).hexdigest()
    assert _journal_mode(db) == "delete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]  # no -wal, -shm or -journal


def test_a_file_that_is_no_database_is_refused_unchanged_and_a_kbench_store_still_opens(tmp_path):
    junk = tmp_path / "notes.db"
    junk.write_text("not a database\n")
    with pytest.raises(StoreError) as ex:
        Store(f"sqlite:///{junk}")
    assert "cannot open the results database" in ex.value.message and "--db" in ex.value.fix
    assert junk.read_text() == "not a database\n"
    ours, empty = tmp_path / "k.db", tmp_path / "empty.db"
    empty.touch()  # an empty file is an empty SQLite database: the store is created in it
    for path in (ours, ours, empty):
        with Store(f"sqlite:///{path}") as st:
            assert st.schema_revision() is not None
