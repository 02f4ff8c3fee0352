"""The one retry layer for provider requests, and the per-provider cap on requests in flight.

Each adapter classifies its SDK's exceptions into an :class:`ErrorKind` (with the server's
``Retry-After`` when it sent one); :func:`call_with_retries` retries ``rate_limit``, ``overloaded``
and ``transient`` failures with exponential backoff and jitter (tenacity), waits exactly what a
``Retry-After`` / ``retry-after-ms`` header asks instead when present, stops at once on ``fatal``,
and never raises for a provider failure: the caller gets the last :class:`ErrorInfo`.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

import tenacity

__all__ = [
    "ErrorInfo",
    "ErrorKind",
    "RetryOutcome",
    "RetryPolicy",
    "call_with_retries",
    "classify_status",
    "parse_retry_after",
    "provider_semaphore",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class ErrorKind(StrEnum):
    """How a failed provider request is treated."""

    RATE_LIMIT = "rate_limit"  # 429: wait (Retry-After) and retry
    OVERLOADED = "overloaded"  # 503 / 529: the provider is busy; retry with backoff
    TRANSIENT = "transient"  # network errors, timeouts, 5xx: retry with backoff
    FATAL = "fatal"  # bad request, bad key, unknown model, quota exhausted: never retried

    @property
    def retryable(self) -> bool:
        return self is not ErrorKind.FATAL


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An adapter's reading of one failed request.

    Attributes:
        kind: the retry class.
        message: what went wrong, for the sample's error text (never holds a key).
        status: HTTP status, when there was a response.
        retry_after_s: the server's requested wait in seconds (``Retry-After``), or None.
    """

    kind: ErrorKind
    message: str
    status: int | None = None
    retry_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff settings.

    Attributes:
        max_attempts: requests per generation, the first included.
        initial_wait_s: first backoff without ``Retry-After``; doubles per retry.
        max_wait_s: cap of one exponential backoff.
        jitter_s: uniform random seconds added to exponential backoffs.
        max_retry_after_s: cap on a server-requested wait (a longer request ends the retries).
    """

    max_attempts: int = 6
    initial_wait_s: float = 1.0
    max_wait_s: float = 60.0
    jitter_s: float = 1.0
    max_retry_after_s: float = 300.0


@dataclass(frozen=True, slots=True)
class RetryOutcome(Generic[T]):
    """What :func:`call_with_retries` got: a value, or the last error; plus the attempts made."""

    value: T | None
    error: ErrorInfo | None
    attempts: int
    waited_s: float


def classify_status(status: int) -> ErrorKind:
    """Retry class of an HTTP status: 429 rate_limit; 503/529 overloaded; 408/409/5xx transient;
    other 4xx (400 bad request, 401/403 key, 404 model) fatal."""
    if status == 429:
        return ErrorKind.RATE_LIMIT
    if status in (503, 529):
        return ErrorKind.OVERLOADED
    if status in (408, 409) or status >= 500:
        return ErrorKind.TRANSIENT
    return ErrorKind.FATAL


def parse_retry_after(headers: Mapping[str, str] | Any | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date).

    Args:
        headers: a case-insensitive mapping (httpx headers) or a dict; None -> None.

    Returns:
        Non-negative seconds, or None when no usable header is present.
    """
    if headers is None:
        return None
    get = headers.get
    ms = get("retry-after-ms") or get("Retry-After-Ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    val = get("retry-after") or get("Retry-After")
    if not val:
        return None
    try:
        return max(0.0, float(val))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(val)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


_SEMAPHORES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary())


def provider_semaphore(key: str, limit: int) -> asyncio.Semaphore:
    """The semaphore capping requests in flight to provider ``key`` in the running event loop.

    Adapters of one provider and endpoint share ``key`` (e.g. ``"openai@https://api.openai.com/v1"``),
    so two models of one provider together stay under the cap. The first caller's ``limit`` wins.

    Raises:
        RuntimeError: when called outside a running event loop.
    """
    loop = asyncio.get_running_loop()
    per_loop = _SEMAPHORES.setdefault(loop, {})
    sem = per_loop.get(key)
    if sem is None:
        sem = per_loop[key] = asyncio.Semaphore(max(1, int(limit)))
    return sem


async def call_with_retries(
    fn: Callable[[], Awaitable[T]],
    classify: Callable[[BaseException], ErrorInfo],
    policy: RetryPolicy,
    *,
    semaphore: asyncio.Semaphore | None = None,
    label: str = "",
) -> RetryOutcome[T]:
    """Call ``fn`` until it succeeds, a fatal error occurs, or ``policy.max_attempts`` are spent.

    Each attempt holds ``semaphore`` while its request is in flight (not while backing off).

    Args:
        fn: makes one request.
        classify: the adapter's reading of an exception ``fn`` raised.
        policy: backoff settings.
        semaphore: the provider's cap on requests in flight.
        label: the adapter's name, for log lines.

    Returns:
        The value or the last error, the number of attempts, and the seconds spent waiting.
        Never raises for exceptions of ``fn`` (``asyncio.CancelledError`` propagates).
    """
    infos: dict[int, ErrorInfo] = {}
    attempts = 0
    waited_s = 0.0
    backoff = tenacity.wait_exponential_jitter(initial=policy.initial_wait_s, max=policy.max_wait_s,
                                               jitter=policy.jitter_s)

    def info_of(exc: BaseException) -> ErrorInfo:
        key = id(exc)
        if key not in infos:
            try:
                infos[key] = classify(exc)
            except Exception as e:  # noqa: BLE001 - a classifier bug must not escape as a provider failure
                log.debug("%s: classifier failed on %r: %r", label, exc, e)
                infos[key] = ErrorInfo(ErrorKind.FATAL, f"{type(exc).__name__}: {exc}")
        return infos[key]

    def should_retry(exc: BaseException) -> bool:
        info = info_of(exc)
        if not info.kind.retryable:
            return False
        return info.retry_after_s is None or info.retry_after_s <= policy.max_retry_after_s

    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        info = info_of(exc) if exc is not None else None
        if info is not None and info.retry_after_s is not None:
            return info.retry_after_s
        return float(backoff(state))

    def before_sleep(state: tenacity.RetryCallState) -> None:
        nonlocal waited_s
        exc = state.outcome.exception() if state.outcome else None
        info = info_of(exc) if exc is not None else ErrorInfo(ErrorKind.TRANSIENT, "")
        delay = state.next_action.sleep if state.next_action else 0.0
        waited_s += delay
        log.warning("%s: %s (%s), retrying in %.1f s (attempt %d of %d)", label, info.kind,
                    info.message[:200], delay, state.attempt_number + 1, policy.max_attempts)

    retrying = tenacity.AsyncRetrying(
        stop=tenacity.stop_after_attempt(max(1, policy.max_attempts)),
        wait=wait,
        retry=tenacity.retry_if_exception(should_retry),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                attempts += 1
                if semaphore is None:
                    value = await fn()
                else:
                    async with semaphore:
                        value = await fn()
        return RetryOutcome(value, None, attempts, waited_s)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the sample's error outcome
        info = info_of(exc)
        log.warning("%s: giving up after %d attempt(s): %s: %s", label, attempts, info.kind,
                    info.message[:300])
        return RetryOutcome(None, info, attempts, waited_s)
