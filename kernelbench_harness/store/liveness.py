"""Who runs a run, and whether it still does.

A run's runner is the process that evaluates it (``kbench run``, or a resumed one). The store records its host
name and pid, an identity of the process on its machine (the boot, the pid namespace and the process's start
time, so that a pid the kernel gave to another process later is not taken for the runner) and a heartbeat the
runner writes every :data:`HEARTBEAT_S` seconds while it works (:class:`Heartbeat`).

A run stored as ``running`` is judged when it is read (:func:`judge_runner`):

- on the machine of its runner (same host name, boot and pid namespace): it runs while that process exists
  with the recorded start time and its heartbeat is younger than :data:`STALE_AFTER_S` (an older one: the
  process is stopped or hung, and counts as gone), and is gone at once otherwise (killed with SIGKILL, crashed,
  the machine restarted);
- anywhere else (a PostgreSQL store shared between hosts, a container with pids of its own): it runs while its
  heartbeat is younger than :data:`STALE_AFTER_S`;
- with no runner recorded (started by a kbench before schema revision 0003): it is gone.

A gone runner's run reads as ``interrupted``, with a note saying why; ``--resume`` continues it.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..execution.quiet import proc_stat

__all__ = [
    "HEARTBEAT_S",
    "STALE_AFTER_S",
    "Heartbeat",
    "Runner",
    "RunnerState",
    "current_runner",
    "format_duration",
    "judge_runner",
]

log = logging.getLogger(__name__)

#: seconds between two heartbeats of a runner
HEARTBEAT_S = 30.0
#: a runner on another host (or in another pid namespace) without a heartbeat for this long is taken as gone
STALE_AFTER_S = 300.0


@dataclass(frozen=True, slots=True)
class Runner:
    """A process that runs a run.

    Attributes:
        host: the host name (``socket.gethostname()``).
        pid: the process id.
        start: ``"<boot id>/<pid namespace>/<start time in clock ticks since boot>"`` (Linux), which tells this
            process apart from any other that had or will have its pid; None where ``/proc`` cannot tell.
    """

    host: str
    pid: int
    start: str | None


@dataclass(frozen=True, slots=True)
class RunnerState:
    """What :func:`judge_runner` found.

    Attributes:
        alive: whether the runner still runs (or, judged by its heartbeat, may).
        local: whether it was judged by its process on this machine (True) or by its heartbeat (False).
        note: one line for people, e.g. ``"runner gone: pid 812 on host-a no longer runs (killed or crashed)"``.
        heartbeat_age_s: seconds since its last heartbeat (None without one).
    """

    alive: bool
    local: bool
    note: str
    heartbeat_age_s: float | None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


@functools.cache
def _machine() -> str | None:
    """``"<boot id>/<pid namespace>"`` of this process (None off Linux): where a pid means one process."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot}/{ns}" if boot else None


def _start_ticks(pid: int | str) -> str | None:
    """The start time (clock ticks since boot) of process ``pid``; None when no such process runs (a zombie,
    killed and not yet reaped, does not)."""
    fields = proc_stat(pid)
    if not fields or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def current_runner() -> Runner:
    """This process as a :class:`Runner`."""
    pid = os.getpid()
    machine, ticks = _machine(), _start_ticks("self")
    return Runner(host=socket.gethostname(), pid=pid, start=f"{machine}/{ticks}" if machine and ticks else None)


def format_duration(seconds: float | None) -> str:
    """``"45 s"``, ``"7 min"``, ``"3.2 h"`` (``"unknown"`` for None)."""
    if seconds is None:
        return "unknown"
    s = max(0.0, seconds)
    if s < 120:
        return f"{s:.0f} s"
    if s < 2 * 3600:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def judge_runner(host: str | None, pid: int | None, start: str | None, heartbeat_at: datetime | None,
                 now: datetime, *, stale_after_s: float = STALE_AFTER_S) -> RunnerState:
    """Whether the runner recorded for a run still runs (see the module docstring for the rules).

    Args:
        host, pid, start: the runner as recorded (:class:`Runner`'s fields); None when none was recorded.
        heartbeat_at: its last heartbeat (timezone-aware), or None.
        now: the time to judge the heartbeat's age by (the database's clock where it has one).
        stale_after_s: how long a runner judged by its heartbeat may go without one (s).
    """
    age = (now - heartbeat_at).total_seconds() if heartbeat_at is not None else None
    if age is not None:
        age = max(0.0, age)  # clocks apart by a little
    if not host or pid is None:
        return RunnerState(False, False, "runner unknown: the run was started by an older kbench, which recorded "
                                         "none", age)
    machine = _machine()
    if start and machine and host == socket.gethostname() and start.rsplit("/", 1)[0] == machine:
        if _start_ticks(pid) == start.rsplit("/", 1)[1]:
            if age is not None and age > stale_after_s:
                # the process is there but its heartbeat thread has not beaten for long: stopped (SIGSTOP, Ctrl-Z)
                # or hung; --resume may take the run over (if the old one goes on, each result is stored once)
                return RunnerState(False, True, f"runner stalled: pid {pid} on this host ({host}) exists but wrote "
                                                f"no heartbeat for {format_duration(age)} (stopped or hung; end it "
                                                f"with kill {pid})", age)
            return RunnerState(True, True, f"runner: pid {pid} on this host ({host})", age)
        return RunnerState(False, True, f"runner gone: pid {pid} on this host ({host}) no longer runs (killed or "
                                        "crashed)", age)
    if age is not None and age <= stale_after_s:
        return RunnerState(True, False, f"runner: pid {pid} on {host}, last heartbeat {format_duration(age)} ago",
                           age)
    return RunnerState(False, False, f"runner gone: no heartbeat from pid {pid} on {host} for "
                                     f"{format_duration(age)} (a runner on another host counts as gone after "
                                     f"{format_duration(stale_after_s)} without one)", age)


class Heartbeat:
    """A thread that writes the run's heartbeat every ``every_s`` seconds (:meth:`Store.heartbeat`) until
    :meth:`stop`. A thread, not a task of the run's event loop, so a loop busy for a while (a long store write)
    does not make the run look gone. A failed write is logged and tried again at the next beat.

    Args:
        store: the run's :class:`~kernelbench_harness.store.Store`.
        run_name: the run.
        every_s: seconds between beats.
    """

    def __init__(self, store: Any, run_name: str, every_s: float = HEARTBEAT_S) -> None:
        self._store = store
        self._run_name = run_name
        self._every_s = every_s
        self._stop = threading.Event()
        self._warned = False
        self._thread = threading.Thread(target=self._loop, name=f"kbench-heartbeat-{run_name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                if not self._store.heartbeat(self._run_name) and not self._warned:
                    self._warned = True
                    log.warning("run %s is recorded as run by another process now; this one goes on, and its "
                                "results are stored once each", self._run_name)
            except Exception as e:  # noqa: BLE001 - the run goes on; the next beat tries again
                log.warning("run %s: heartbeat not written: %s", self._run_name, e)

    def stop(self) -> None:
        """End the thread (waits for a beat in progress)."""
        self._stop.set()
        self._thread.join(timeout=60)
