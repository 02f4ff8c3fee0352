"""The candidate channel's signatures (``channel.Channel`` with a key): what the worker's channel object sends is
read; a line written to the socket by anything else (``os.write`` on its file descriptor), a changed line, a line
replayed out of order or one signed with another key is refused with ``ChannelError``."""

from __future__ import annotations

import os
import socket

import pytest

from kernelbench_harness.execution.channel import Channel, ChannelError

KEY = bytes(range(32))


def _pair(key_a: bytes | None = KEY, key_b: bytes | None = KEY) -> tuple[Channel, Channel]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return Channel(a, key=key_a), Channel(b, key=key_b)


def test_signed_messages_arrive_in_order() -> None:
    a, b = _pair()
    for i in range(3):
        a.send({"event": "timing", "i": i})
    assert [b.recv(timeout_s=1.0)["i"] for _ in range(3)] == [0, 1, 2]


def test_a_line_written_to_the_socket_is_refused() -> None:
    a, b = _pair()
    a.send({"event": "output", "i": 0})
    os.write(a.sock.fileno(), b'{"event": "timing", "stats": {"median_ms": 0.0001}}\n')
    assert b.recv(timeout_s=1.0)["i"] == 0
    with pytest.raises(ChannelError, match="not signed by the harness"):
        b.recv(timeout_s=1.0)


def test_a_changed_or_replayed_line_is_refused() -> None:
    raw_a, raw_b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a, b = Channel(raw_a, key=KEY), Channel(raw_b, key=KEY)
    a.send({"event": "timing", "median_ms": 2.0})
    line = raw_b.recv(1 << 16)
    assert line.split(b" ", 1)[1].startswith(b"{")
    raw_a.sendall(line)  # the first message as sent: read
    assert b.recv(timeout_s=1.0)["median_ms"] == 2.0
    raw_a.sendall(line)  # the same line again, in the second message's place: refused
    with pytest.raises(ChannelError):
        b.recv(timeout_s=1.0)
    c, d = _pair()
    raw = Channel(c.sock)  # (unsigned writer on the same socket)
    mac = c._mac(0, b'{"event":"timing","median_ms":0.001}')
    raw.sock.sendall(mac + b' {"event":"timing","median_ms":2.0}\n')  # the text changed under a valid MAC
    with pytest.raises(ChannelError):
        d.recv(timeout_s=1.0)


def test_another_key_or_no_key_is_refused() -> None:
    a, b = _pair(key_a=bytes(32))
    a.send({"event": "hello"})
    with pytest.raises(ChannelError):
        b.recv(timeout_s=1.0)
    a, b = _pair(key_a=None)
    a.send({"event": "hello"})
    with pytest.raises(ChannelError):
        b.recv(timeout_s=1.0)
    a, b = _pair(key_a=None, key_b=None)  # no key at either end: plain JSON lines, as before
    a.send({"event": "hello"})
    assert b.recv(timeout_s=1.0) == {"event": "hello"}
