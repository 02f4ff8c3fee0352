"""Who runs a run (store/liveness.py), on SQLite and PostgreSQL: a run whose runner is gone reads as
interrupted, a second runner is refused while the first runs, and a runner on another host is judged by its
heartbeat."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from kernelbench_harness.core import Problem
from kernelbench_harness.errors import StoreError
from kernelbench_harness.store import Store
from kernelbench_harness.store.liveness import STALE_AFTER_S, Heartbeat, current_runner, judge_runner
from kernelbench_harness.store.models import RunRow

# a runner in a process of its own: it creates the run, says so, and waits to be killed
_RUNNER = textwrap.dedent("""
    import sys, time
    from kernelbench_harness.core import Problem
    from kernelbench_harness.store import Store

    Store(sys.argv[1]).create_run("r", model="m", protocol={"name": "kbench"}, config={}, hardware={},
                                  problems=[Problem(1, 1, "P1", "# p1\\n")])
    print("created", flush=True)
    time.sleep(600)
""")


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    with Store(db_url) as st:
        yield st


def _create(store: Store, name: str = "r") -> None:
    store.create_run(name, model="m", protocol={"name": "kbench"}, config={}, hardware={},
                     problems=[Problem(1, 1, "P1", "# p1\n")])


def _set(store: Store, name: str = "r", **values: object) -> None:
    with store._write() as s:
        s.execute(update(RunRow).where(RunRow.run_name == name).values(**values))


def test_a_killed_runner_reads_interrupted_and_its_run_can_be_claimed(db_url: str, store: Store) -> None:
    """A real runner process: while it lives, its run reads running and a second runner is refused with its
    pid and host; once it is SIGKILLed, the run reads interrupted (runner gone) and a claim succeeds."""
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER, db_url], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "created"
        info = store.get_run("r")
        assert info is not None and info.status == "running"
        assert (info.runner_host, info.runner_pid) == (socket.gethostname(), proc.pid)
        assert info.heartbeat_at is not None and f"pid {proc.pid} on this host" in info.status_note
        with pytest.raises(StoreError) as e:
            store.claim_run("r", check_only=True)
        assert f"still being run by pid {proc.pid} on this host ({socket.gethostname()})" in e.value.message
        assert f"kill {proc.pid}" in (e.value.fix or "")
        with pytest.raises(StoreError):
            store.claim_run("r")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    info = store.get_run("r")
    assert info is not None and info.status == "interrupted"
    assert f"runner gone: pid {proc.pid} on this host" in info.status_note
    assert [r.status for r in store.list_runs()] == ["interrupted"]
    store.claim_run("r")
    info = store.get_run("r")
    assert info is not None and info.status == "running" and info.runner_pid == os.getpid()


def test_a_reused_pid_is_not_taken_for_the_runner(store: Store) -> None:
    """The recorded process's start time must match: another process with the runner's pid is not it."""
    _create(store)
    me = current_runner()
    assert me.start is not None, "no /proc: this test needs Linux"
    machine, ticks = me.start.rsplit("/", 1)
    _set(store, runner_start=f"{machine}/{int(ticks) + 1}")
    info = store.get_run("r")
    assert info is not None and info.status == "interrupted" and "runner gone" in info.status_note
    store.claim_run("r")  # and it can be taken over


def test_a_runner_on_another_host_is_judged_by_its_heartbeat(store: Store) -> None:
    _create(store)
    now = datetime.now(UTC)
    _set(store, runner_host="gpu-node-7", runner_pid=4242, heartbeat_at=now - timedelta(seconds=60))
    info = store.get_run("r")
    assert info is not None and info.status == "running"
    assert "pid 4242 on gpu-node-7, last heartbeat" in info.status_note
    with pytest.raises(StoreError) as e:
        store.claim_run("r")
    msg, fix = e.value.message, e.value.fix or ""
    assert "pid 4242 on gpu-node-7, another host (last heartbeat" in msg
    assert "kill 4242" in fix and "no heartbeat for 5 min" in fix, fix
    _set(store, heartbeat_at=now - timedelta(seconds=STALE_AFTER_S + 300))
    info = store.get_run("r")
    assert info is not None and info.status == "interrupted"
    assert "runner gone: no heartbeat from pid 4242 on gpu-node-7 for 10 min" in info.status_note
    store.claim_run("r")
    info = store.get_run("r")
    assert info is not None and (info.status, info.runner_host, info.runner_pid) == (
        "running", socket.gethostname(), os.getpid())


def test_same_host_name_in_another_pid_namespace_is_judged_by_its_heartbeat() -> None:
    """A pid means one process only inside its pid namespace (a container may share the host's name)."""
    me = current_runner()
    assert me.start is not None
    other = "/".join(me.start.split("/")[:-2] + ["pid:[1]", "1"])
    now = datetime.now(UTC)
    fresh = judge_runner(me.host, 1, other, now - timedelta(seconds=5), now)
    assert fresh.alive and not fresh.local
    stale = judge_runner(me.host, 1, other, now - timedelta(seconds=STALE_AFTER_S + 1), now)
    assert not stale.alive and "no heartbeat" in stale.note


def test_a_runner_on_this_host_without_a_heartbeat_for_long_is_stalled_not_alive() -> None:
    """A stopped (Ctrl-Z, SIGSTOP) or hung runner on this host still exists: it counted as alive for good, so
    ``--resume`` was refused until someone killed it. Past the stale age it is judged gone, with its pid named."""
    me = current_runner()
    assert me.start is not None
    now = datetime.now(UTC)
    fresh = judge_runner(me.host, me.pid, me.start, now - timedelta(seconds=5), now)
    assert fresh.alive and fresh.local
    stalled = judge_runner(me.host, me.pid, me.start, now - timedelta(seconds=STALE_AFTER_S + 60), now)
    assert not stalled.alive and stalled.local
    assert f"runner stalled: pid {me.pid} on this host" in stalled.note and f"kill {me.pid}" in stalled.note
    assert judge_runner(me.host, me.pid, me.start, None, now).alive  # no heartbeat yet: judged by the process


def test_terminal_statuses_are_not_judged_and_keep_their_runner(store: Store) -> None:
    _create(store)
    store.set_run_status("r", "finished")
    _set(store, runner_pid=1, runner_start="gone/gone/1")
    info = store.get_run("r")
    assert info is not None and (info.status, info.status_note, info.runner_pid) == ("finished", "", 1)
    store.claim_run("r", check_only=True)  # nothing runs it: no refusal, nothing written
    assert store.get_run("r").status == "finished"  # type: ignore[union-attr]


def test_heartbeat_is_written_by_the_runner_only(store: Store) -> None:
    _create(store)
    first = store.get_run("r").heartbeat_at  # type: ignore[union-attr]
    beat = Heartbeat(store, "r", every_s=0.05)
    try:
        deadline = time.monotonic() + 10
        while store.get_run("r").heartbeat_at == first and time.monotonic() < deadline:  # type: ignore[union-attr]
            time.sleep(0.05)
    finally:
        beat.stop()
    assert store.get_run("r").heartbeat_at > first  # type: ignore[operator,union-attr]
    # taken over by another process: this one's heartbeat writes nothing
    _set(store, runner_host="gpu-node-7", runner_pid=4242)
    assert store.heartbeat("r") is False
    assert store.heartbeat("no-such-run") is False
