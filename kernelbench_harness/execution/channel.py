"""Newline-delimited JSON messages over a stream socket, with deadlines and a size cap.

Used between the trusted device worker and a candidate process. The trusted side treats every
message as untrusted input: oversize lines and non-JSON raise :class:`ChannelError`.
"""

from __future__ import annotations

import json
import select
import socket
import time
from typing import Any

__all__ = ["Channel", "ChannelError", "ChannelTimeout", "ChannelClosed"]

MAX_LINE = 16 * 1024 * 1024


class ChannelError(Exception):
    """The peer sent something that is not a protocol message."""


class ChannelTimeout(ChannelError):
    """No message before the deadline."""


class ChannelClosed(ChannelError):
    """The peer closed the connection (exited or crashed)."""


class Channel:
    """JSON-lines messaging over a connected stream socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray()

    def send(self, obj: dict[str, Any]) -> None:
        data = json.dumps(obj, separators=(",", ":"), default=str).encode() + b"\n"
        self.sock.sendall(data)

    def recv(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Next message. Raises ChannelTimeout, ChannelClosed or ChannelError."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                try:
                    msg = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise ChannelError(f"malformed message: {e}") from None
                if not isinstance(msg, dict):
                    raise ChannelError("message is not a JSON object")
                return msg
            if len(self._buf) > MAX_LINE:
                raise ChannelError("message exceeds the size limit")
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if wait is not None and wait == 0.0:
                raise ChannelTimeout("no message before the deadline")
            r, _, _ = select.select([self.sock], [], [], wait)
            if not r:
                raise ChannelTimeout("no message before the deadline")
            try:
                chunk = self.sock.recv(1 << 20)
            except (ConnectionResetError, OSError) as e:
                raise ChannelClosed(str(e)) from None
            if not chunk:
                raise ChannelClosed("peer closed the connection")
            self._buf += chunk

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
