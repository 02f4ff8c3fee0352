"""Newline-delimited JSON messages over a stream socket, with deadlines and a size cap, signed when both ends
hold a key.

Used between the trusted device worker and a candidate process. The trusted side treats every
message as untrusted input: oversize lines and non-JSON raise :class:`ChannelError`.
"""

from __future__ import annotations

import hmac
import json
import json.encoder
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


# What a message is written with, taken when this module is imported (in a candidate process, before any
# candidate code): the C string encoder and the socket's own sendall. ``json.dumps`` looks its encoder class
# and helpers up when called, so a candidate that patched ``json.JSONEncoder.encode`` could rewrite every
# message (the timing message's times among them); these references cannot be reached that way.
_ENCODE_STR = json.encoder.encode_basestring_ascii
_FLOAT_REPR = float.__repr__
_INT_REPR = int.__repr__
_SENDALL = socket.socket.sendall
_DIGEST = hmac.digest
_SAME = hmac.compare_digest
_isinstance, _type, _str = isinstance, type, str


def dumps(obj: Any) -> str:
    """``obj`` as compact JSON (dicts, lists, tuples, strings, numbers, booleans, None; anything else as
    its ``str``), written without ``json.dumps``: see the module's note. NaN and infinities are written
    as ``json`` writes them (``NaN``, ``Infinity``), which :func:`json.loads` reads back."""
    t = _type(obj)
    if obj is None:
        return "null"
    if t is bool:
        return "true" if obj else "false"
    if t is str:
        return _ENCODE_STR(obj)
    if t is int:
        return _INT_REPR(obj)
    if t is float:
        if obj != obj:
            return "NaN"
        if obj in (float("inf"), float("-inf")):
            return "Infinity" if obj > 0 else "-Infinity"
        return _FLOAT_REPR(obj)
    if t is dict:
        return "{" + ",".join(_ENCODE_STR(k if _type(k) is str else _str(k)) + ":" + dumps(v)
                              for k, v in obj.items()) + "}"
    if t is list or t is tuple:
        return "[" + ",".join(dumps(v) for v in obj) + "]"
    if _isinstance(obj, bool):
        return "true" if obj else "false"
    if _isinstance(obj, int):
        return _INT_REPR(obj)
    if _isinstance(obj, float):  # a subclass (numpy.float64): as the float it is
        return dumps(float(obj))
    return _ENCODE_STR(_str(obj))


class Channel:
    """JSON-lines messaging over a connected stream socket.

    With ``key`` (the same secret bytes at both ends), each line is ``<mac> <json>``, where ``mac`` is the hex
    HMAC-SHA256 of the message's number in its direction and the JSON text, and a received line whose MAC does not
    match raises :class:`ChannelError`. A candidate's process can write to its end of the socket with ``os.write``
    without touching any of the worker's objects (a forged ``timing`` message ahead of the worker's own, which the
    trusted side then reads as the answer); without the key, which only the worker's channel object holds, it
    cannot sign one.
    """

    def __init__(self, sock: socket.socket, key: bytes | None = None) -> None:
        self.sock = sock
        self._buf = bytearray()
        self._key = key
        self._sent = 0
        self._received = 0

    def _mac(self, n: int, body: bytes) -> bytes:
        return _DIGEST(self._key, b"%d:" % n + body, "sha256").hex().encode("ascii")  # type: ignore[arg-type]

    def send(self, obj: dict[str, Any]) -> None:
        body = dumps(obj).encode("ascii")
        if self._key is not None:
            body = self._mac(self._sent, body) + b" " + body
            self._sent += 1
        _SENDALL(self.sock, body + b"\n")

    def recv(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Next message. Raises ChannelTimeout, ChannelClosed or ChannelError."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                if self._key is not None:
                    mac, _, line = line.partition(b" ")
                    if not _SAME(mac, self._mac(self._received, line)):
                        raise ChannelError(f"message {self._received} on the harness's channel is not signed by the "
                                           "harness (its process wrote to the channel itself)")
                    self._received += 1
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

    def pending(self) -> bool:
        """Whether something from the peer waits to be read: bytes already buffered, or the socket readable now
        (data, or the peer's end of the connection). Never blocks."""
        if self._buf:
            return True
        try:
            r, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True  # a closed socket: recv says so
        return bool(r)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
