"""Host-wide files of kbench processes: scratch folders a killed run does not leave behind, and the
per-device lock that separate runs on one host share (:class:`HostDeviceLock`: timing windows hold it
exclusively, torch.compile warm-ups shared).

Device slots keep each problem's input sets and every candidate's outputs in a scratch folder, on
``/dev/shm`` when it has room. A run killed with SIGKILL (or a machine's OOM killer) cannot remove its
folder, and tmpfs holds it in memory: on the CPU machine one killed level-1 run left 17 GB in
``/dev/shm/kbench``. Each folder is therefore claimed with an exclusive ``flock`` on its ``.owner``
file for as long as its process lives; the next run that makes a folder in the same place removes
every sibling whose lock it can take (the owner is gone), and leaves alone the ones still claimed and
the ones without an ``.owner`` file (a folder being created, or made by an older version).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["HostDeviceLock", "claim_scratch", "device_lock_key", "release_fd", "sweep_stale_scratch"]

log = logging.getLogger(__name__)

OWNER = ".owner"


def sweep_stale_scratch(base: Path, prefix: str) -> list[Path]:
    """Remove folders ``base/<prefix>*`` whose owning process is gone.

    Args:
        base: the scratch root (``/dev/shm/kbench`` or ``$TMPDIR/kbench``).
        prefix: the folder prefix of one kind of owner (``kbdev_``, ``kbbuild_``).

    Returns:
        The folders removed. Errors (permissions, a folder removed meanwhile) are skipped.
    """
    removed: list[Path] = []
    try:
        entries = list(base.glob(prefix + "*"))
    except OSError:
        return removed
    for d in entries:
        try:
            fd = os.open(d / OWNER, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue  # no owner file: being created, or not ours to judge
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # claimed by a live process
        try:
            shutil.rmtree(d, ignore_errors=True)
            if not d.exists():
                removed.append(d)
        finally:
            os.close(fd)
    if removed:
        log.warning("removed %d scratch folder(s) left by killed runs under %s", len(removed), base)
    return removed


def claim_scratch(base: Path, prefix: str) -> tuple[Path, int]:
    """A new folder ``base/<prefix>XXXX`` claimed by this process, after sweeping stale siblings.

    Returns:
        ``(folder, fd)``: keep ``fd`` open for the folder's lifetime (closing it, or the process
        ending, releases the claim).
    """
    base.mkdir(parents=True, exist_ok=True)
    sweep_stale_scratch(base, prefix)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    fd = os.open(folder / OWNER, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return folder, fd


def release_fd(fd: int) -> int:
    """Close a claim's ``fd`` once (``-1`` is ignored); returns ``-1`` to store in its place."""
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass
    return -1


def device_lock_key(device: Any) -> str | None:
    """The key of a device's :class:`HostDeviceLock`: ``gpu-<uuid>`` for a CUDA device, else None.

    Args:
        device: a ``torch.device`` or a device string (``"cpu"``, ``"cuda"``, ``"cuda:0"``), as seen by
            this process (its ``CUDA_VISIBLE_DEVICES`` applies).

    Returns:
        ``"gpu-<uuid>"`` (the UUID from ``torch.cuda.get_device_properties``; ``"gpu-pci-<domain>-<bus>-
        <device>"`` when the properties carry no UUID), the same for every process that sees this
        physical GPU under whatever index; None for a non-CUDA device.

    Raises:
        RuntimeError: (from torch) a malformed device string, or a CUDA device this process cannot use.
    """
    import torch  # here, not at import time: scratch folders are made where CUDA is not needed

    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(dev)
    ident = str(getattr(props, "uuid", "") or "") or "pci-{}-{}-{}".format(
        getattr(props, "pci_domain_id", 0), getattr(props, "pci_bus_id", 0), getattr(props, "pci_device_id", 0))
    return f"gpu-{ident}"


def flock_holders(paths: list[Path] | list[str]) -> set[int]:
    """Process ids that hold or wait for an ``flock`` on any of ``paths`` (``/proc/locks``, which records
    the process that took each lock). Empty where /proc cannot tell; missing files are skipped."""
    try:
        files = set()
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            files.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
        out: set[int] = set()
        if not files:
            return out
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF", or "1: -> FLOCK ..." for a waiter
                if "->" in parts:
                    parts.remove("->")
                if len(parts) >= 6 and parts[1] == "FLOCK":
                    ident = parts[5].split(":")
                    if len(ident) == 3 and (int(ident[0], 16), int(ident[1], 16), int(ident[2])) in files:
                        out.add(int(parts[4]))
        return out
    except (OSError, ValueError):
        return set()


class HostDeviceLock:
    """A fair reader-writer lock on one physical device, shared by every kbench process on this host.

    The timing lock that a run's slots share covers one run only. Two runs on one host (two users, or
    two runs restricted to the same GPU) would time on the same device at once, and each would
    measure the other's kernels as its own time; and a run's torch.compile warm-up processes
    (:mod:`.warm`) run and benchmark kernels on the GPU while its slots already time other problems.
    This lock keeps them apart: timing windows hold it **exclusively** (no other timing and no
    warm-up on the device meanwhile); warm-up GPU work holds it **shared** (warm-ups may overlap each
    other, never a timing window).

    Protocol: two ``flock`` files in ``$TMPDIR/kbench-locks``, ``<key>.lock`` (the lock itself) and
    ``<key>.turn`` (a turnstile). Every acquirer first takes the turnstile exclusively, then takes
    the main lock (``LOCK_EX`` or ``LOCK_SH``), then releases the turnstile. A plain ``flock`` lets a
    new shared holder in while an exclusive one waits, so a stream of overlapping shared holders
    would starve a timing window forever; with the turnstile, the waiting exclusive holder keeps it
    while the current shared holders drain, and new shared holders queue behind it. (Waiters on the
    turnstile are not served in order, but each holds it only for an instant unless the main lock
    is taken, so nobody waits there for long.) A process killed at any point releases both files
    (the kernel drops its ``flock`` locks), so nobody waits forever on a dead holder.

    The files reach only processes that share this host's ``$TMPDIR`` (``/tmp``): processes in
    other containers with their own ``/tmp``, or with another ``TMPDIR``, are not kept apart.

    One instance holds the lock at most once at a time (take it again after :meth:`release`); use
    one instance per thread.

    Args:
        key: the device's identity on the host (see :func:`device_lock_key`: a GPU's UUID or PCI bus
            id); characters outside ``[A-Za-z0-9_.-]`` are replaced.
        folder: where the lock files live (default ``$TMPDIR/kbench-locks``).
    """

    def __init__(self, key: str, folder: Path | None = None) -> None:
        safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in key) or "device"
        self.folder = folder or Path(tempfile.gettempdir()) / "kbench-locks"
        self.path = self.folder / f"{safe}.lock"
        self.turn_path = self.folder / f"{safe}.turn"
        self._fd = -1
        self.shared = False  # how the lock is held now (meaningless while not held)

    def _open(self, path: Path) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:  # whatever the umask: another user's kbench run on this host takes the same files
            os.fchmod(fd, 0o666)
        except OSError:  # made by another user: theirs to set
            pass
        return fd

    def acquire(self, shared: bool = False, timeout_s: float | None = None) -> float:
        """Block until this process holds the lock; returns the seconds waited.

        Args:
            shared: take it shared (warm-up GPU work: overlaps other shared holders, never an
                exclusive one) instead of exclusively (a timing window: alone on the device).
            timeout_s: give up after this many seconds (polling every 2 ms instead of blocking in the
                kernel); None waits for as long as it takes.

        Returns:
            Seconds spent waiting (turnstile and lock), from ``time.perf_counter``.

        Raises:
            RuntimeError: this instance already holds the lock.
            TimeoutError: not held within ``timeout_s`` (nothing is held then).
            OSError: the lock folder or files cannot be created or opened (permissions).
        """
        if self._fd >= 0:
            raise RuntimeError(f"{self.path} is already held by this HostDeviceLock")
        self.folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)

        def take(fd: int, how: int) -> None:
            if deadline is None:
                fcntl.flock(fd, how)
                return
            while True:
                try:
                    fcntl.flock(fd, how | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"{self.path}: not held within {timeout_s:g} s") from None
                    time.sleep(0.002)

        turn = self._open(self.turn_path)
        try:
            take(turn, fcntl.LOCK_EX)  # behind a waiting exclusive holder, if there is one
            fd = self._open(self.path)
            try:
                take(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            self._fd, self.shared = fd, shared  # held from here on: release() frees it whatever follows
        finally:
            try:  # explicitly: a forked child holding a copy of the fd must not keep the turnstile
                fcntl.flock(turn, fcntl.LOCK_UN)
            finally:
                os.close(turn)
        return time.perf_counter() - t0

    def holders(self) -> set[int]:
        """Process ids that hold or wait for either of the lock's files (``/proc/locks``; ``flock``
        records the process that took the lock). Empty where /proc cannot tell."""
        return flock_holders([self.path, self.turn_path])

    def contended(self) -> bool:
        """Whether another process is queued at the turnstile: a timing window waiting for the shared
        holders to drain (or, for an instant, another acquirer passing through). A shared holder that
        sees this at a point where it has no GPU work in flight can :meth:`release` and :meth:`acquire`
        again, so the window waits for that point instead of for the end of the whole stretch.

        Raises:
            OSError: the turnstile file cannot be opened.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        turn = self._open(self.turn_path)
        try:
            try:
                fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(turn, fcntl.LOCK_UN)
            return False
        finally:
            os.close(turn)

    def release(self) -> None:
        """Release the lock (a no-op when not held)."""
        if self._fd >= 0:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                self._fd = release_fd(self._fd)

    @contextmanager
    def hold(self, shared: bool = False) -> Iterator[float]:
        """Hold the lock for a ``with`` block (see :meth:`acquire`); yields the seconds waited.

        Raises:
            RuntimeError, OSError: as :meth:`acquire`.
        """
        waited = self.acquire(shared)
        try:
            yield waited
        finally:
            self.release()
