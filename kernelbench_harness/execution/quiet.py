"""A quiet host while a timing window is open: the run's own builds and warm-ups are paused.

Session 9 on an H200 (``scripts/gpu/host_load.py``) showed that timings the host paces (a call the host
issues more slowly than the GPU runs it) slow by 20-70% when other processes keep the host's *other*
cores busy. Pinning the timing slot to its own cores does not isolate a VM's cores. Builds (nvcc, g++)
and torch.compile warm-ups run beside every timing window of a sweep, so a result could depend on
what the sweep happened to be compiling at that moment.

:class:`HostQuieter` SIGSTOPs every process the run started (the runner's descendants) except the
device slots and their candidates, for the duration of a window, and SIGCONTs them after. It is
bounded: a watchdog lets them go on after ``max_s`` whatever the window does, so a window that needs
something a paused process holds (an Inductor cache lock, say) waits at most that long. Paused
processes hold the device's host lock neither shared nor exclusively (the window holds it
exclusively), and a warm-up queued at its turnstile goes on as soon as they are continued.

Linux only (``/proc``); elsewhere nothing is paused.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable

__all__ = ["HostQuieter", "descendants", "continue_all"]


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in ``/proc`` (empty where there is no /proc)."""
    out: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                rest = f.read().rsplit(b") ", 1)[1].split()
            out[int(name)] = int(rest[1])
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
    return out


def descendants(root: int, exclude: Iterable[int] = ()) -> list[int]:
    """Every descendant of process ``root`` (not ``root`` itself), leaving out each pid in ``exclude``
    with all of its own descendants.

    Args:
        root: a process id.
        exclude: process ids whose subtrees are left out.

    Returns:
        Process ids, parents before their children.
    """
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    skip = set(exclude)
    out: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        if pid in skip or pid == root:
            continue
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def continue_all(root: int, exclude: Iterable[int] = ()) -> None:
    """SIGCONT every descendant of ``root`` outside ``exclude``'s subtrees: after a device slot died while
    it had them paused (its watchdog died with it)."""
    for pid in descendants(root, exclude):
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass


class HostQuieter:
    """Pause the run's other processes while a timing window is open (see the module's description).

    Args:
        root: the runner's process id (the processes to pause are its descendants).
        keep: returns the process ids whose subtrees keep running (the run's device slots: this one,
            with the candidate it times, and the others, whose candidates are stopped by their slots
            while they give way).
        max_s: the longest a pause lasts; then a watchdog continues the processes.

    Usage::

        n = q.pause()    # as the window opens (after its locks are taken)
        ...              # timing
        q.resume()       # as it closes (before the locks are released)
    """

    def __init__(self, root: int, keep: Callable[[], Iterable[int]], max_s: float = 5.0) -> None:
        if max_s <= 0:
            raise ValueError(f"max_s={max_s!r}: expected a positive number of seconds")
        self.root = root
        self.keep = keep
        self.max_s = float(max_s)
        self._paused: list[int] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self.last_s = 0.0  # how long the last pause lasted
        self._t0 = 0.0

    def pause(self) -> int:
        """SIGSTOP the run's other processes; returns how many. A pause already in place is ended first."""
        self.resume()
        try:
            keep = set(self.keep()) | {os.getpid()}
        except Exception:  # noqa: BLE001 - without the list nothing is paused rather than a slot
            return 0
        pids = descendants(self.root, keep)
        stopped: list[int] = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            except OSError:
                pass
        with self._lock:
            self._paused = stopped
            self._t0 = time.perf_counter()
            if stopped:
                self._timer = threading.Timer(self.max_s, self.resume)
                self._timer.daemon = True
                self._timer.start()
        return len(stopped)

    def resume(self) -> None:
        """SIGCONT what :meth:`pause` stopped (a no-op when nothing is paused)."""
        with self._lock:
            paused, self._paused = self._paused, []
            timer, self._timer = self._timer, None
            if paused:
                self.last_s = time.perf_counter() - self._t0
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        for pid in paused:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
