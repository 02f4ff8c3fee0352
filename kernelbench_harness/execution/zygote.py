"""A fork server for candidate processes: torch is imported once, each candidate gets a fresh fork.

Starting a Python process and importing torch costs seconds; forking a process that already holds
torch (but has never touched CUDA) costs milliseconds, and the child initialises CUDA itself. The
zygote is started by the trusted device worker with an already-clean environment (no credentials
ever enter it), and receives over its control socket::

    8-byte length + one file descriptor (the child's socket), then that many bytes of
    {"cmd": "spawn", "job": {...}, "sandbox": {...}}

It forks; the child applies the sandbox and runs :func:`.worker.child_main`; the zygote answers
``{"pid": N}`` and later ``{"exit": N, "status": S}`` (``S`` as from ``os.waitstatus_to_exitcode``:
negative for a signal). The zygote runs no threads (fork safety) and never runs torch ops.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys

__all__ = ["main"]


def _recv_exact(ctrl: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = ctrl.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("control socket closed inside a request")
        buf += chunk
    return bytes(buf)


def _recv(ctrl: socket.socket) -> tuple[dict | None, list[int]]:
    """One request: an 8-byte big-endian length sent with the file descriptor, then that many bytes
    of JSON (a stream socket may split a large job anywhere, so the length frames it)."""
    try:
        head, fds, _flags, _addr = socket.recv_fds(ctrl, 8, 4)
    except (ConnectionResetError, BrokenPipeError):  # the device worker is gone (Ctrl-C, killed): as closed
        return None, []
    if not head:
        return None, fds
    try:
        if len(head) < 8:
            head += _recv_exact(ctrl, 8 - len(head))
        body = _recv_exact(ctrl, int.from_bytes(head, "big"))
    except (EOFError, ConnectionResetError, BrokenPipeError):
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(body.decode()), fds


def _send(ctrl: socket.socket, obj: dict) -> None:
    try:
        ctrl.sendall(json.dumps(obj).encode() + b"\n")
    except (ConnectionResetError, BrokenPipeError):  # the device worker is gone: the next read ends the loop
        pass


def _reap(ctrl: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(ctrl, {"exit": pid, "status": os.waitstatus_to_exitcode(status)})


def main() -> None:
    """``python -m kernelbench_harness.execution.zygote CTRL_FD``."""
    ctrl = socket.socket(fileno=int(sys.argv[1]))
    # Heavy imports once, before any fork. Importing torch does not initialise CUDA.
    import numpy  # noqa: F401
    import torch  # noqa: F401

    try:
        import triton  # noqa: F401
    except Exception:
        pass
    from . import worker  # noqa: F401  (captures the original timer functions)

    _send(ctrl, {"ready": os.getpid()})
    while True:
        r, _, _ = select.select([ctrl], [], [], 0.05)
        _reap(ctrl)
        if not r:
            continue
        msg, fds = _recv(ctrl)
        if msg is None:
            break
        if msg.get("cmd") != "spawn" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            _send(ctrl, {"error": "bad request"})
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ctrl.close()
                code = worker.child_main(fds[0], msg["job"], msg.get("sandbox"))
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                except Exception:
                    pass
                os._exit(code)
        os.close(fds[0])
        _send(ctrl, {"pid": pid})
    # control socket closed: the device worker is gone; end every child
    os._exit(0)


if __name__ == "__main__":
    main()
