"""A quiet host while a timing window is open: the run's own builds and warm-ups are paused.

On by default for the local executor where every slot of a run is on one GPU (``kbench run
--no-quiet-host`` turns it off; never under ``--executor ray``). On
an H200, two runs of the same 20 level-1 candidates, each measuring its own baselines while the first
built its candidates beside its windows, gave speedups vs eager within a p95 of 36% of each other
without it (``docs/gpu/2026-12-02-s15/``) and 2.2% with it (``docs/gpu/2026-12-02-s14/``).

Session 9 on an H200 (``scripts/gpu/host_load.py``) showed that timings the host paces (a call the host
issues more slowly than the GPU runs it) slow by 20-70% when other processes keep the host's *other*
cores busy. Pinning the timing slot to its own cores does not isolate a VM's cores. Builds (nvcc, g++)
and torch.compile warm-ups run beside every timing window of a sweep, so a result could depend on
what the sweep happened to be compiling at that moment.

:class:`HostQuieter` SIGSTOPs every process the run started (the runner's descendants) except the
device slots and their candidates, for the duration of a window, and SIGCONTs them after. It is
bounded: a watchdog lets them go on after ``max_s`` whatever the window does, so a window that needs
something a paused process holds (an Inductor cache lock, say) waits at most that long. On one
device, paused processes hold the device's host lock neither shared nor exclusively (the window holds
it exclusively). The local executor turns it on only where every slot is on one GPU: windows on two
GPUs overlap, and one would continue what the other paused.

Linux only (``/proc``); elsewhere nothing is paused.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

__all__ = ["HostQuieter", "children", "descendants", "continue_all", "in_tree", "proc_stat"]


def proc_stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (``pid`` may be ``"self"``): index 0
    is the state (``R``, ``S``, ``T``...), 1 the parent's pid, 19 the start time in clock ticks. None
    where the process is gone or /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b") ", 1)[1].decode("ascii", "replace").split()
    except (OSError, IndexError):
        return None


def in_tree(pid: int, root: int, depth: int = 16) -> bool:
    """Whether process ``pid`` is ``root`` or one of its descendants (following parents in ``/proc``,
    at most ``depth`` generations)."""
    for _ in range(depth):
        if pid == root:
            return True
        fields = proc_stat(pid) if pid > 1 else None
        if not fields or len(fields) < 2 or not fields[1].isdigit():
            return False
        pid = int(fields[1])
    return False


def _children_of(pid: int) -> list[int] | None:
    """The children of ``pid`` from ``/proc/<pid>/task/*/children``; None where the kernel does not
    provide that file."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out  # ended meanwhile
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if os.path.isdir(f"/proc/{pid}/task/{tid}"):
                return None  # no such file on this kernel (CONFIG_PROC_CHILDREN off)
        except (OSError, ValueError):
            continue
    return out


def children(pid: int) -> list[int]:
    """The children of process ``pid``: from ``/proc/<pid>/task/*/children`` where the kernel lists them, else
    from every process's parent in ``/proc``."""
    kids = _children_of(pid)
    return kids if kids is not None else [c for c, parent in _parents().items() if parent == pid]


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in ``/proc`` (the slow path: every process read)."""
    out: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        fields = proc_stat(name) if name.isdigit() else None
        if fields and len(fields) > 1 and fields[1].isdigit():  # else ended meanwhile
            out[int(name)] = int(fields[1])
    return out


def descendants(root: int, exclude: Iterable[int] = ()) -> list[int]:
    """Every descendant of process ``root`` (not ``root`` itself), leaving out each pid in ``exclude``
    with all of its own descendants. Reads only the run's own processes where the kernel lists each
    task's children, else every process in ``/proc``.

    Args:
        root: a process id.
        exclude: process ids whose subtrees are left out.

    Returns:
        Process ids, parents before their children.
    """
    skip = set(exclude) | {root}
    by_parent: dict[int, list[int]] | None = None
    out: list[int] = []
    todo: deque[int] = deque([root])
    while todo:
        pid = todo.popleft()
        kids = _children_of(pid) if by_parent is None else by_parent.get(pid, [])
        if kids is None:  # the slow path from here on
            by_parent = {}
            for child, parent in _parents().items():
                by_parent.setdefault(parent, []).append(child)
            kids = by_parent.get(pid, [])
        for child in kids:
            if child not in skip:
                skip.add(child)
                out.append(child)
                todo.append(child)
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

    Raises:
        ValueError: ``max_s`` is not positive.

    Usage::

        n = q.pause()    # as the window opens (after its locks are taken)
        ...              # timing
        q.resume()       # as it closes (before the locks are released), also when pause() raised
    """

    def __init__(self, root: int, keep: Callable[[], Iterable[int]], max_s: float = 5.0) -> None:
        if max_s <= 0:
            raise ValueError(f"max_s={max_s!r}: expected a positive number of seconds")
        self.root = root
        self.keep = keep
        self.max_s = float(max_s)
        self._paused: list[int] = []
        self._lock = threading.Lock()
        self._gen = 0  # bumped by every pause and resume: a late watchdog of an earlier pause does nothing
        self._timer: threading.Timer | None = None
        self.last_s = 0.0  # how long the last pause lasted
        self._t0 = 0.0

    def pause(self) -> int:
        """SIGSTOP the run's other processes; returns how many. A pause already in place is ended first.
        Every process is recorded before it is signalled, and the watchdog runs before the first
        signal, so :meth:`resume` (or the watchdog) continues whatever was stopped."""
        self.resume()
        try:
            keep = set(self.keep()) | {os.getpid()}
        except Exception:  # noqa: BLE001 - without the list nothing is paused rather than a slot
            return 0
        pids = descendants(self.root, keep)
        if not pids:
            return 0
        with self._lock:
            self._gen += 1
            self._paused = list(pids)
            self._t0 = time.perf_counter()
            self._timer = threading.Timer(self.max_s, self._expire, args=(self._gen,))
            self._timer.daemon = True
            self._timer.start()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        return len(pids)

    def _expire(self, gen: int) -> None:
        with self._lock:
            if gen != self._gen:
                return  # that pause has ended already
        self.resume()

    def resume(self) -> None:
        """SIGCONT what :meth:`pause` stopped (a no-op when nothing is paused)."""
        with self._lock:
            self._gen += 1
            paused, self._paused = self._paused, []
            timer, self._timer = self._timer, None
            if paused:
                self.last_s = time.perf_counter() - self._t0
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        i = 0
        try:
            while i < len(paused):
                try:
                    os.kill(paused[i], signal.SIGCONT)
                except OSError:
                    pass
                i += 1
        finally:
            for pid in paused[i:]:  # interrupted (KeyboardInterrupt): continue the rest all the same
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
