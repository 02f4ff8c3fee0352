"""Host-wide files of kbench processes: scratch folders a killed run does not leave behind, and the
per-device timing lock that separate runs on one host share (:class:`HostDeviceLock`).

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
from pathlib import Path

__all__ = ["HostDeviceLock", "claim_scratch", "release_fd", "sweep_stale_scratch"]

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


class HostDeviceLock:
    """An exclusive lock on one physical device, shared by every kbench process on this host.

    The timing lock that a run's slots share covers one run only. Two runs on one host (two users, or
    two runs restricted to the same GPU) would time on the same device at once, and each would
    measure the other's kernels as its own time. This lock, an ``flock`` on
    ``$TMPDIR/kbench-locks/<key>.lock``, keeps their timing windows apart too. It does not reach
    processes in other containers with their own ``/tmp``.

    Args:
        key: the device's identity on the host (a GPU's UUID or PCI bus id); characters outside
            ``[A-Za-z0-9_.-]`` are replaced.
        folder: where the lock files live (default ``$TMPDIR/kbench-locks``).
    """

    def __init__(self, key: str, folder: Path | None = None) -> None:
        safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in key) or "device"
        self.folder = folder or Path(tempfile.gettempdir()) / "kbench-locks"
        self.path = self.folder / f"{safe}.lock"
        self._fd = -1

    def acquire(self) -> float:
        """Block until this process holds the lock; returns the seconds waited."""
        self.folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return time.perf_counter() - t0

    def release(self) -> None:
        """Release the lock (a no-op when not held)."""
        if self._fd >= 0:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                self._fd = release_fd(self._fd)
