"""A fork server for candidate processes: torch is imported once, each candidate gets a fresh fork.

Starting a Python process and importing torch costs seconds; forking a process that already holds
torch (but has never touched CUDA) costs milliseconds, and the child initialises CUDA itself. The
zygote is started by the trusted device worker with an already-clean environment (no credentials
ever enter it), and receives over its control socket::

    {"cmd": "spawn", "job": {...}, "sandbox": {...}}  + one file descriptor (the child's socket)

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


def _recv(ctrl: socket.socket) -> tuple[dict | None, list[int]]:
    msg, fds, _flags, _addr = socket.recv_fds(ctrl, 1 << 22, 4)
    if not msg:
        return None, fds
    return json.loads(msg.decode()), fds


def _send(ctrl: socket.socket, obj: dict) -> None:
    ctrl.sendall(json.dumps(obj).encode() + b"\n")


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
