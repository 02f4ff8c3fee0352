"""Starting, watching and killing candidate processes.

Two start methods behind one interface (:class:`Launcher`):

- ``zygote`` (default): a fork server that imported torch once (:mod:`.zygote`); a candidate starts in
  milliseconds;
- ``spawn``: a fresh ``python -m kernelbench_harness.execution.worker`` per candidate (slower; used
  when the zygote cannot start, and in tests of the start path).

Either way the candidate's environment is :func:`.sandbox.clean_environment` of ours, it runs in its
own process group (killed whole on timeout), and its resident memory is watched.
"""

from __future__ import annotations

import json
import logging
import os
import select
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .channel import Channel, ChannelClosed, ChannelError

__all__ = ["Launcher", "ChildHandle"]

log = logging.getLogger(__name__)


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _tree_bytes(folder: Path, max_files: int) -> tuple[int, int]:
    """``(bytes allocated to the files under folder, files seen)``; stops counting past ``max_files`` files.
    Links are not followed; a file that goes meanwhile is skipped."""
    total = files = 0
    stack = [str(folder)]
    while stack and files <= max_files:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                        continue
                    files += 1
                    total += e.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    continue
    return total, files


@dataclass
class ChildHandle:
    """A running candidate process."""

    pid: int
    chan: Channel
    launcher: "Launcher"
    killed_reason: str = ""
    peak_rss_bytes: int = 0
    exit_code: int | None = None
    _watch: threading.Thread | None = field(default=None, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)

    def kill(self, reason: str) -> None:
        """SIGKILL the whole process group (the candidate, its threads, nvcc, ninja...)."""
        if not self.killed_reason:
            self.killed_reason = reason
        for target in (lambda: os.killpg(self.pid, signal.SIGKILL), lambda: os.kill(self.pid, signal.SIGKILL)):
            try:
                target()
            except (ProcessLookupError, PermissionError, OSError):
                pass

    def wait_exit(self, timeout_s: float = 10.0) -> int | None:
        """Exit code (negative = killed by that signal), or None if it did not end in time."""
        if self.exit_code is None:
            self.exit_code = self.launcher._wait(self.pid, timeout_s)
        self._stop.set()
        return self.exit_code

    def close(self) -> None:
        self._stop.set()
        self.chan.close()
        if self.wait_exit(2.0) is None:
            self.kill("closed")
            self.wait_exit(5.0)
        try:  # what the candidate left running in its process group after it exited (a review's helpers outlived it)
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass

    #: the most files a watched private folder may hold (counting them must stay cheap)
    FOLDER_MAX_FILES = 20_000

    def watch_memory(self, limit_bytes: int, interval_s: float = 0.1, folder: Path | None = None,
                     folder_every: int = 10) -> None:
        """Kill the process group when the candidate's resident memory, plus the bytes of the files in its private
        ``folder`` (counted every ``folder_every`` checks), exceeds ``limit_bytes``.

        The folder counts because the run's scratch lives in ``/dev/shm`` where it has room: its files are the
        host's memory. Each file was bounded (``RLIMIT_FSIZE``) but not their sum, so one candidate could take the
        host's shared memory while it ran (stop 39's second attack). A folder of more than
        :attr:`FOLDER_MAX_FILES` files ends the candidate too."""

        def run() -> None:
            ticks, folder_bytes = 0, 0
            while not self._stop.wait(interval_s):
                if folder is not None and ticks % max(1, folder_every) == 0:
                    folder_bytes, files = _tree_bytes(folder, self.FOLDER_MAX_FILES)
                    if files > self.FOLDER_MAX_FILES:
                        self.kill(f"more than {self.FOLDER_MAX_FILES} files in its private folder")
                        return
                ticks += 1
                rss = _rss_bytes(self.pid)
                self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
                if limit_bytes and rss + folder_bytes > limit_bytes:
                    what = "resident memory" if not folder_bytes else \
                        f"resident memory and its private folder's {folder_bytes / 2**30:.1f} GiB of files"
                    self.kill(f"{what} ({(rss + folder_bytes) / 2**30:.1f} GiB) over the limit "
                              f"{limit_bytes / 2**30:.1f} GiB")
                    return

        self._watch = threading.Thread(target=run, name=f"kb-memwatch-{self.pid}", daemon=True)
        self._watch.start()


class Launcher:
    """Starts candidate processes with a fixed, clean environment.

    Args:
        env: the complete environment of every candidate process (already cleaned).
        method: ``zygote`` or ``spawn``.
    """

    def __init__(self, env: dict[str, str], method: str = "zygote") -> None:
        self.env = dict(env)
        self.method = method
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self._cond = threading.Condition()
        self._popen: dict[int, subprocess.Popen[bytes]] = {}
        self._zygote: subprocess.Popen[bytes] | None = None
        self._ctrl: socket.socket | None = None
        self._pending_pid: list[int] = []
        self._reader: threading.Thread | None = None
        self._ready_lock = threading.Lock()
        self._zygote_ready = False
        self._closed = False
        if method == "zygote":
            try:
                self._start_zygote()
            except Exception as e:
                log.warning("fork server unavailable (%s); starting candidates with spawn", e)
                self.method = "spawn"

    # -- zygote -----------------------------------------------------------------------------------
    def _start_zygote(self) -> None:
        """Start the fork server; its ``ready`` line (after it imported torch: 2-5 s) is awaited at the first
        :meth:`start` (:meth:`_await_zygote`), so the caller goes on meanwhile: the runner's build pool held its
        event loop about 2 s before the first job otherwise, in runs that then built nothing."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._zygote = subprocess.Popen(
                [sys.executable, "-m", "kernelbench_harness.execution.zygote", str(child.fileno())],
                env=self.env, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=None, start_new_session=True)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self._ctrl = parent
        self._ctrl_buf = b""

    def _await_zygote(self) -> bool:
        """True once the fork server said it is ready (read once, here); False, and ``spawn`` from then on,
        where it did not within 120 s or has died."""
        with self._ready_lock:
            if self._zygote_ready:
                return True
            if self.method != "zygote" or self._zygote is None or self._closed:
                return False
            try:
                ready: Any = self._read_ctrl_line(timeout_s=120)
            except Exception as e:  # noqa: BLE001 - a malformed line, a socket closed meanwhile: not ready
                ready = f"{type(e).__name__}: {e}"
            if not isinstance(ready, dict) or "ready" not in ready:
                if not self._closed:  # (closed meanwhile: the launcher's close says why, not this)
                    log.warning("fork server unavailable (it did not start: %s); starting candidates with spawn",
                                ready)
                self.method = "spawn"
                if self._zygote.poll() is None:
                    self._zygote.kill()  # hung or still importing: it would not see the socket close for seconds
                self._stop_zygote()
                return False
            self._reader = threading.Thread(target=self._read_loop, name="kb-zygote-reader", daemon=True)
            self._reader.start()
            self._zygote_ready = True
            return True

    def _read_ctrl_line(self, timeout_s: float | None) -> dict[str, Any] | None:
        assert self._ctrl is not None
        # The control socket stays blocking: a timeout (settimeout) would switch the shared file
        # description to non-blocking, and a request sent from another thread while the reader
        # switched it back failed with EAGAIN (seen under load: "fork server failed ([Errno 11]...)").
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._ctrl_buf:
            if deadline is not None:
                ready, _, _ = select.select([self._ctrl], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    return None
            try:
                chunk = self._ctrl.recv(65536)
            except OSError:
                return None
            if not chunk:
                return None
            self._ctrl_buf += chunk
        line, self._ctrl_buf = self._ctrl_buf.split(b"\n", 1)
        return json.loads(line)

    def _read_loop(self) -> None:
        while True:
            msg = self._read_ctrl_line(timeout_s=None)
            if msg is None:
                with self._cond:
                    self._dead = True
                    self._cond.notify_all()
                return
            with self._cond:
                if "pid" in msg:
                    self._pending_pid.append(int(msg["pid"]))
                elif "exit" in msg:
                    self._exits[int(msg["exit"])] = int(msg["status"])
                elif "error" in msg:
                    self._pending_pid.append(-1)
                self._cond.notify_all()

    def _spawn_zygote(self, payload: dict[str, Any]) -> tuple[int, socket.socket]:
        assert self._ctrl is not None
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with self._lock:
            data = json.dumps({"cmd": "spawn", **payload}).encode()
            # length first, with the descriptor; then the body (see zygote._recv)
            head = len(data).to_bytes(8, "big")
            sent = socket.send_fds(self._ctrl, [head], [theirs.fileno()])
            self._ctrl.sendall(head[sent:] + data)
            theirs.close()
            with self._cond:
                ok = self._cond.wait_for(lambda: self._pending_pid or getattr(self, "_dead", False), timeout=60)
                if not ok or not self._pending_pid:
                    raise RuntimeError("fork server did not answer")
                pid = self._pending_pid.pop(0)
        if pid < 0:
            raise RuntimeError("fork server refused the request")
        return pid, mine

    # -- spawn ------------------------------------------------------------------------------------
    def _spawn_fresh(self, payload: dict[str, Any]) -> tuple[int, socket.socket]:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        p = subprocess.Popen([sys.executable, "-m", "kernelbench_harness.execution.worker", str(theirs.fileno())],
                             env=self.env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        Channel(mine).send(payload)
        self._popen[p.pid] = p
        return p.pid, mine

    # -- common -----------------------------------------------------------------------------------
    def start(self, job: dict[str, Any], sandbox: dict[str, Any] | None) -> ChildHandle:
        """Start a candidate process for ``job``; returns once it is running (before it says hello)."""
        # the channel's key (see .channel.Channel): the candidate's process holds it only in its channel object
        job = dict(job, channel_key=job.get("channel_key") or secrets.token_hex(32))
        payload = {"job": job, "sandbox": sandbox}

        def refuse_if_closed() -> None:
            if self._closed:  # (close() may come while a first start waits for the fork server)
                raise ChannelClosed("the launcher is closed: no candidate process is started after close()")

        refuse_if_closed()
        if self.method == "zygote" and self._await_zygote() and self._zygote is not None and self._zygote.poll() is None:
            try:
                pid, sock = self._spawn_zygote(payload)
            except (RuntimeError, OSError) as e:
                refuse_if_closed()
                log.warning("fork server failed (%s); falling back to spawn", e)
                self.method = "spawn"
                pid, sock = self._spawn_fresh(payload)
        else:
            refuse_if_closed()
            pid, sock = self._spawn_fresh(payload)
        if self._closed:  # close() came while it started (after its check): it saw none of this process
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            sock.close()
            refuse_if_closed()
        return ChildHandle(pid=pid, chan=Channel(sock, key=bytes.fromhex(job["channel_key"])), launcher=self)

    def _wait(self, pid: int, timeout_s: float) -> int | None:
        p = self._popen.get(pid)
        if p is not None:
            try:
                code = p.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return None
            self._popen.pop(pid, None)
            return code
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits or getattr(self, "_dead", False), timeout=timeout_s)
            return self._exits.pop(pid, None)

    def close(self) -> None:
        self._closed = True  # start() refuses from here on (a first start waiting for the server returns spawn-less)
        for pid in list(self._popen):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        if self._zygote is not None and not self._zygote_ready and self._zygote.poll() is None:
            self._zygote.kill()  # never used: still importing torch, it would not see the socket close for seconds
        self._stop_zygote()

    def _stop_zygote(self) -> None:
        """Close the control socket (the fork server exits on EOF) and reap it, killing it after 5 s."""
        if self._ctrl is not None:
            try:
                self._ctrl.shutdown(socket.SHUT_RDWR)  # the zygote sees EOF now, not at garbage collection
            except OSError:
                pass
            try:
                self._ctrl.close()
            except OSError:
                pass
        if self._zygote is not None:
            try:
                self._zygote.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._zygote.kill()
                try:
                    self._zygote.wait(timeout=5)
                except subprocess.TimeoutExpired:  # (stuck in the kernel: left to init)
                    pass


def recv_event(handle: ChildHandle, deadline: float) -> dict[str, Any]:
    """Next message from a candidate, or raise ChannelError subclasses (timeout / closed / malformed)."""
    remaining = max(0.0, deadline - time.monotonic())
    return handle.chan.recv(timeout_s=remaining)


__all__ += ["recv_event", "ChannelClosed", "ChannelError"]
