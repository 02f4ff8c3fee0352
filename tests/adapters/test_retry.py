"""The retry layer on its own: Retry-After parsing, status classes, retry / give-up behaviour."""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import time

import pytest

from kernelbench_harness.adapters.retry import (
    ErrorInfo,
    ErrorKind,
    RetryPolicy,
    call_with_retries,
    classify_status,
    parse_retry_after,
)

FAST = RetryPolicy(max_attempts=4, initial_wait_s=0.01, max_wait_s=0.05, jitter_s=0.0)


def test_parse_retry_after():
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < parse_retry_after({"Retry-After": future}) <= 31
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None


@pytest.mark.parametrize("status,kind", [(429, "rate_limit"), (503, "overloaded"), (529, "overloaded"),
                                         (500, "transient"), (502, "transient"), (408, "transient"),
                                         (400, "fatal"), (401, "fatal"), (403, "fatal"), (404, "fatal")])
def test_classify_status(status, kind):
    assert classify_status(status) == kind


class Boom(Exception):
    def __init__(self, kind: ErrorKind, retry_after: float | None = None):
        super().__init__(kind)
        self.info = ErrorInfo(kind, f"boom {kind}", retry_after_s=retry_after)


def _run(fails: list[Boom], policy: RetryPolicy = FAST):
    calls = []

    async def fn():
        calls.append(time.monotonic())
        if len(calls) <= len(fails):
            raise fails[len(calls) - 1]
        return "ok"

    out = asyncio.run(call_with_retries(fn, lambda e: e.info, policy, label="t"))
    return out, calls


def test_transient_then_success():
    out, calls = _run([Boom(ErrorKind.TRANSIENT), Boom(ErrorKind.OVERLOADED)])
    assert out.value == "ok" and out.error is None and out.attempts == 3 and len(calls) == 3


def test_fatal_is_not_retried():
    out, calls = _run([Boom(ErrorKind.FATAL)])
    assert out.value is None and out.error.kind is ErrorKind.FATAL and out.attempts == 1 and len(calls) == 1


def test_retry_after_is_honoured_and_gives_up_after_max_attempts():
    out, calls = _run([Boom(ErrorKind.RATE_LIMIT, 0.2)] * 4)
    assert out.error.kind is ErrorKind.RATE_LIMIT and out.attempts == 4
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert all(g >= 0.2 for g in gaps) and out.waited_s == pytest.approx(0.6)


def test_too_long_retry_after_stops_at_once():
    out, calls = _run([Boom(ErrorKind.RATE_LIMIT, 3600.0)])
    assert out.error.kind is ErrorKind.RATE_LIMIT and len(calls) == 1


def test_non_provider_exception_becomes_fatal_error():
    async def fn():
        raise KeyError("bug")

    def classify(e):
        raise RuntimeError("classifier bug")

    out = asyncio.run(call_with_retries(fn, classify, FAST))
    assert out.error.kind is ErrorKind.FATAL and "KeyError" in out.error.message
