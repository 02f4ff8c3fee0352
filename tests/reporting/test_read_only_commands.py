"""The commands that only read the store open it read-only: a sweep writing the same SQLite file never waits
for them (nor they for it), a file they cannot write is read all the same, and an older schema is named, not
upgraded."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from synthetic_run import build_store

from kernelbench_harness.cli import cli
from kernelbench_harness.errors import StoreError
from kernelbench_harness.store import Store, api, upgrade_schema


def _read_commands(db: str, out: Path) -> list[list[str]]:
    return [["runs", "list", "--db", db], ["show", "synth-a", "L1/1", "--db", db],
            ["report", "synth-a", "--db", db, "--out", str(out / "report"), "--resamples", "20"],
            ["export", "synth-a", "--db", db, "--out", str(out / "export")],
            ["leaderboard", "--db", db, "--out", str(out / "site"), "--resamples", "20"],
            ["baselines", "list", "--db", db]]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    path = tmp_path / "db" / "kbench.db"
    path.parent.mkdir()
    build_store(path).close()
    return path


def test_read_only_commands_do_not_wait_for_a_sweep_holding_the_write_lock(store_file, tmp_path, monkeypatch):
    """Opening the store took SQLite's write lock (BEGIN IMMEDIATE for the migration check): while a sweep held it,
    `kbench runs list` waited 30 s and then failed with 'database is locked'."""
    monkeypatch.setattr(api, "_SQLITE_BUSY_MS", 1500)  # a wait for the lock fails in 1.5 s, not 30
    sweep = sqlite3.connect(store_file, isolation_level=None, timeout=0)
    try:
        sweep.execute("BEGIN IMMEDIATE")
        sweep.execute("UPDATE runs SET status = 'running' WHERE run_name = 'synth-b'")
        for args in _read_commands(f"sqlite:///{store_file}", tmp_path):
            res = CliRunner().invoke(cli, args)
            assert res.exit_code == 0, (args, res.output, res.exception)
        # and a read-only store being read does not stop the sweep's next write transaction
        with Store(f"sqlite:///{store_file}", read_only=True) as ro:
            assert ro.get_run("synth-a") is not None
            sweep.execute("COMMIT")
            with ro._read() as s:
                s.execute(api.text("SELECT count(*) FROM runs")).scalar()
                sweep.execute("BEGIN IMMEDIATE")  # timeout=0: fails at once if the reader held a lock against it
                sweep.execute("UPDATE runs SET status = 'finished' WHERE run_name = 'synth-b'")
                sweep.execute("COMMIT")
            with pytest.raises(StoreError, match="opened read-only"):
                ro.set_run_status("synth-b", "finished")
    finally:
        sweep.close()


def _as_a_user_without_write_access(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``python -m kernelbench_harness ARGS``; as root, with every capability dropped, so that file modes hold."""
    cmd = [sys.executable, "-m", "kernelbench_harness", *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv: file modes do not bind this process")
        cmd = [setpriv, "--inh-caps=-all", "--bounding-set=-all", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.mark.parametrize("folder_mode", [0o755, 0o555])
def test_read_only_commands_read_a_store_they_cannot_write_and_leave_it_as_it_was(store_file, tmp_path, folder_mode):
    """A chmod 0444 store in a read-only folder failed with 'attempt to write a readonly database' and a fix
    about writable folders; in a writable folder it was read, leaving -wal and -shm files (mode 0444) beside it."""
    folder = store_file.parent
    before = _files(folder)
    store_file.chmod(0o444)
    folder.chmod(folder_mode)
    try:
        for args in (["runs", "list", "--db", str(store_file)],
                     ["report", "synth-a", "--db", str(store_file), "--out", str(tmp_path / "r"), "--resamples", "20"]):
            res = _as_a_user_without_write_access(args)
            assert res.returncode == 0, res.stderr
        assert "synth-a" in res.stdout or "report written" in res.stdout
        assert _files(folder) == before  # no -wal or -shm left, not a byte changed
    finally:
        folder.chmod(0o755)
        store_file.chmod(0o644)


def test_an_older_schema_is_named_with_the_command_that_upgrades_it_and_left_as_it_was(tmp_path):
    """A read-only command ran the migrations (a write) on an older store; now it says so and names `kbench db
    upgrade`, which upgrades it."""
    path = tmp_path / "old.db"
    db = f"sqlite:///{path}"
    upgrade_schema(db, "0002")
    before = path.read_bytes()
    res = CliRunner().invoke(cli, ["runs", "list", "--db", db])
    assert isinstance(res.exception, StoreError), res.output
    assert "schema revision 0002, older than this kbench's (0003)" in res.exception.message
    assert f"kbench db upgrade --db {db}" in res.exception.fix
    assert path.read_bytes() == before
    res = CliRunner().invoke(cli, ["db", "upgrade", "--db", db])
    assert res.exit_code == 0 and "schema revision 0003" in res.output, res.output
    res = CliRunner().invoke(cli, ["runs", "list", "--db", db])
    assert res.exit_code == 0 and "no runs yet" in res.output
    missing = CliRunner().invoke(cli, ["db", "upgrade", "--db", str(tmp_path / "none.db")])
    assert isinstance(missing.exception, StoreError) and not (tmp_path / "none.db").exists()
