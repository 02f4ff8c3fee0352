"""Shared machinery of the adapters that call a chat model over HTTP through its official SDK.

:class:`ChatAdapter` resolves keys, base URLs and limits (options > ``kbench.toml`` > environment >
defaults), imports the SDK lazily, runs every request through the retry layer and the provider's
concurrency cap, extracts the code, prices the tokens and turns failures into
``Generation(error=...)``. A provider subclass supplies the SDK call (:meth:`ChatAdapter._complete`)
and the classification of its exceptions (:meth:`ChatAdapter.classify`).

Adapter options (everything else given as options is a default model argument, e.g. ``temperature``):

============== ==========================================================================
``model``        the provider's model name (usually from the spec)
``name``         the model name stored with results (default: the spec)
``base_url``     endpoint; ``base_url_env`` names a variable to read it from
``api_key``      key; ``api_key_env`` names a variable to read it from
``max_concurrency`` requests in flight to this provider endpoint
``timeout_s``    seconds per HTTP request
``max_attempts`` requests per generation, first included; ``retry_initial_s``, ``retry_max_s``,
                 ``retry_jitter_s``, ``max_retry_after_s`` tune the backoff
============== ==========================================================================

A model argument that is none the adapter knows (its SDK's named parameters, :attr:`ChatAdapter.server_params`,
the options above) yet is close to one of them (``tempreature``, ``max_tokns``) gets a warning naming the
nearest known key, once per adapter: it still goes to the server as given (in the request body), and a
server that ignores unknown fields (vLLM does) would sample without the setting meant. A field sent on
purpose is passed inside ``extra_body`` (``-M 'extra_body={top_a=0.1}'``), which is never warned about.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import importlib
import logging
import os
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..config import KbenchConfig, load_config
from ..errors import ConfigError, PrerequisiteError
from ..prompts import extract_code
from .base import Generation, GenerationRequest, ModelAdapter
from .retry import (
    ErrorInfo,
    ErrorKind,
    RetryPolicy,
    call_with_retries,
    classify_status,
    parse_retry_after,
    provider_semaphore,
)

__all__ = ["ADAPTER_OPTIONS", "NEAR_MISS_CUTOFF", "ChatAdapter", "Reply", "redact", "split_options"]

log = logging.getLogger(__name__)

ADAPTER_OPTIONS: frozenset[str] = frozenset({
    "model", "name", "base_url", "base_url_env", "api_key", "api_key_env", "max_concurrency", "timeout_s",
    "max_attempts", "retry_initial_s", "retry_max_s", "retry_jitter_s", "max_retry_after_s",
})
"""Option keys that configure an HTTP adapter; any other option is a default model argument."""

#: how alike (difflib's ratio) an unknown model argument and a known key must be for the one to be taken for a
#: misspelling of the other: 'tempreature' and 'temperature' are 0.91 alike, 'max_tokns' and 'max_tokens' 0.95
NEAR_MISS_CUTOFF = 0.8


def split_options(options: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``options`` into (adapter options, default model arguments)."""
    opts = dict(options or {})
    return ({k: v for k, v in opts.items() if k in ADAPTER_OPTIONS},
            {k: v for k, v in opts.items() if k not in ADAPTER_OPTIONS})


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret (of 8 characters or more) replaced by ``***``."""
    for s in secrets:
        if s and len(s) >= 8:
            text = text.replace(s, "***")
    return text


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful provider response, normalised.

    Attributes:
        text: the answer text (reasoning / thinking parts excluded).
        model: the model name the provider reported ("" if none).
        input_tokens: all input tokens, cached ones included.
        output_tokens: all output tokens, reasoning ones included.
        cached_tokens: input tokens read from the provider's prompt cache.
        reasoning_tokens: output tokens spent on reasoning / thinking.
        finish_reason: the provider's stop reason.
    """

    text: str
    model: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    finish_reason: str = ""


def _as_int(v: Any, what: str) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ConfigError(f"adapter option {what} must be an integer, got {v!r}", fix=f"pass e.g. -O {what}=4") \
            from None


def _as_str(v: Any, what: str, example: str) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise ConfigError(f"adapter option {what} must be a string, got {v!r}", fix=f"pass e.g. -O {what}={example}")


def _as_float(v: Any, what: str) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"adapter option {what} must be a number, got {v!r}", fix=f"pass e.g. -O {what}=60") \
            from None


class ChatAdapter(ModelAdapter):
    """Base of the SDK-backed adapters (OpenAI-compatible, Anthropic, Google).

    Args:
        model: the provider's model name ("" lets a subclass discover it, see ``LocalAdapter``).
        name: the name stored with results; default ``f"{provider}/{model}"``.
        options: adapter options and default model arguments (see the module docstring).
        config: the resolved ``kbench.toml`` (prices, provider settings); default: loaded now.

    Raises:
        ConfigError: for malformed option values.
    """

    provider: ClassVar[str] = ""
    sdk_module: ClassVar[str] = ""  # imported lazily, e.g. "openai"
    extra: ClassVar[str] = ""  # pip extra that installs it
    key_envs: ClassVar[tuple[str, ...]] = ()  # default key variables, first found wins
    base_url_envs: ClassVar[tuple[str, ...]] = ()
    default_base_url: ClassVar[str | None] = None
    default_max_concurrency: ClassVar[int] = 8
    default_timeout_s: ClassVar[float] = 600.0
    server_params: ClassVar[frozenset[str]] = frozenset()
    """Model arguments the provider's servers document beyond the SDK's named parameters (they go in the
    request body); with those and the SDK's they are the keys a misspelt argument is matched against."""

    def __init__(self, model: str, *, name: str | None = None, options: Mapping[str, Any] | None = None,
                 config: KbenchConfig | None = None) -> None:
        opts, params = split_options(options)
        self.config = config if config is not None else load_config()
        settings = self.config.provider(self.provider)
        self.model = str(opts.get("model") or model)
        self.spec = f"{self.provider}/{self.model}" if self.model else self.provider
        self.name = str(opts.get("name") or name or self.spec)
        self.default_params: dict[str, Any] = params

        self.base_url_env: str | None = _as_str(opts.get("base_url_env"), "base_url_env", "MY_BASE_URL")
        self.base_url: str | None = (_as_str(opts.get("base_url"), "base_url", "http://localhost:8000/v1")
                                     or (os.environ.get(self.base_url_env) if self.base_url_env else None)
                                     or settings.base_url
                                     or next((os.environ[e] for e in self.base_url_envs if os.environ.get(e)),
                                             None)
                                     or self.default_base_url)
        if self.base_url:
            self.base_url = self.base_url.rstrip("/")

        key_env = _as_str(opts.get("api_key_env"), "api_key_env", "MY_API_KEY") or settings.api_key_env
        self.key_env_names: tuple[str, ...] = (key_env,) if key_env else self.key_envs
        self._api_key: str | None = (None if opts.get("api_key") is None else str(opts["api_key"])) or next(
            (os.environ[e] for e in self.key_env_names if os.environ.get(e)), None)

        mc = opts.get("max_concurrency", settings.max_concurrency)
        self.max_concurrency = max(1, _as_int(mc, "max_concurrency")) if mc is not None \
            else self.default_max_concurrency
        self.timeout_s = _as_float(opts.get("timeout_s", self.default_timeout_s), "timeout_s")
        defaults = RetryPolicy()
        self.retry_policy = RetryPolicy(
            max_attempts=max(1, _as_int(opts.get("max_attempts", defaults.max_attempts), "max_attempts")),
            initial_wait_s=_as_float(opts.get("retry_initial_s", defaults.initial_wait_s), "retry_initial_s"),
            max_wait_s=_as_float(opts.get("retry_max_s", defaults.max_wait_s), "retry_max_s"),
            jitter_s=_as_float(opts.get("retry_jitter_s", defaults.jitter_s), "retry_jitter_s"),
            max_retry_after_s=_as_float(opts.get("max_retry_after_s", defaults.max_retry_after_s),
                                        "max_retry_after_s"),
        )
        self._clients: dict[int, Any] = {}  # id(event loop) -> SDK client
        self._checked_args: set[str] = set()  # model argument keys already checked for misspellings

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r})"

    # --- prerequisites ---------------------------------------------------------------------------
    @property
    def needs_key(self) -> bool:
        """Whether requests need an API key (local servers do not)."""
        return True

    @property
    def has_key(self) -> bool:
        return bool(self._api_key)

    def _import_sdk(self) -> Any:
        try:
            return importlib.import_module(self.sdk_module)
        except ImportError:
            raise PrerequisiteError(
                f"{self.name} needs the {self.sdk_module} package, which is not installed",
                fix=f"pip install 'kernelbench-harness[{self.extra}]'") from None

    def _missing_key_error(self) -> PrerequisiteError:
        names = " or ".join(self.key_env_names)
        return PrerequisiteError(f"{self.name} needs an API key and none is set",
                                 fix=f"set {names}" if names else "pass -M api_key=...")

    def check_ready(self) -> None:
        """Raise :class:`PrerequisiteError` when the SDK is missing or a needed key is unset."""
        self._import_sdk()
        if self.needs_key and not self.has_key:
            raise self._missing_key_error()

    def secrets(self) -> tuple[str, ...]:
        """Values that must never appear in logs or results."""
        return (self._api_key,) if self._api_key else ()

    # --- client lifecycle ------------------------------------------------------------------------
    def _client(self) -> Any:
        """The SDK client of the running event loop (HTTP pools cannot cross loops).

        Raises:
            PrerequisiteError: SDK missing or key missing.
        """
        loop = asyncio.get_running_loop()
        client = self._clients.get(id(loop))
        if client is None:
            sdk = self._import_sdk()
            if self.needs_key and not self.has_key:
                raise self._missing_key_error()
            client = self._make_client(sdk)
            self._clients = {id(loop): client}  # an earlier loop's client is unusable now
        return client

    @abstractmethod
    def _make_client(self, sdk: Any) -> Any:
        """Create the SDK's async client with retries disabled (kbench retries)."""

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            close = getattr(c, "close", None) or getattr(c, "aclose", None)
            if close is not None:
                try:
                    res = close()
                    if asyncio.iscoroutine(res):
                        await res
                except Exception as e:  # noqa: BLE001 - closing is best effort
                    log.debug("%s: closing client failed: %r", self.name, e)

    # --- one request -----------------------------------------------------------------------------
    @abstractmethod
    async def _complete(self, client: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> Reply:
        """Send one request through the SDK and normalise the response. Raises SDK exceptions."""

    @abstractmethod
    def classify(self, exc: BaseException) -> ErrorInfo:
        """Retry class of an exception raised by :meth:`_complete`."""

    def _known_params(self, client: Any) -> frozenset[str]:
        """The model arguments the SDK call takes by name; empty: the adapter refuses unknown ones itself."""
        return frozenset()

    def _warn_near_misses(self, params: Mapping[str, Any], client: Any) -> None:
        """Log a warning for each model argument not seen before that no one knows and that is close to a
        known key (see the module docstring)."""
        new = [k for k in params if k not in self._checked_args]
        if not new:
            return
        self._checked_args.update(new)
        sdk = self._known_params(client)
        if not sdk:
            return
        known = sdk | self.server_params
        keys = sorted(known | ADAPTER_OPTIONS)
        for k in new:
            near = [] if k in known else difflib.get_close_matches(k, keys, n=1, cutoff=NEAR_MISS_CUTOFF)
            if near:
                log.warning("%s: unknown model argument %r (did you mean %r?) is sent to the server as given, "
                            "which may ignore it; to send it on purpose, pass it as -M 'extra_body={%s=...}'",
                            self.name, k, near[0], k)

    def _classify_common(self, exc: BaseException) -> ErrorInfo | None:
        """Classes every SDK shares: timeouts and connection failures are transient."""
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
            return ErrorInfo(ErrorKind.TRANSIENT, f"{type(exc).__name__}: {exc}")
        if isinstance(exc, PrerequisiteError):
            return ErrorInfo(ErrorKind.FATAL, str(exc))
        return None

    def _status_info(self, status: int, message: str, headers: Any, *, fatal_codes: Sequence[str] = (),
                     body: Any = None) -> ErrorInfo:
        kind = classify_status(status)
        code = _error_code(body)
        if code and code in fatal_codes:
            kind = ErrorKind.FATAL
        return ErrorInfo(kind, f"HTTP {status}: {message}", status, parse_retry_after(headers))

    async def generate(self, request: GenerationRequest) -> Generation:
        """Answer one turn; provider failures come back as ``Generation(error=..., error_kind=...)``."""
        params = {**self.default_params, **dict(request.params or {})}
        messages = [dict(m) for m in request.messages]
        secrets = self.secrets()
        try:
            client = self._client()
        except PrerequisiteError as e:
            return Generation(text="", code=None, model=self.model, error=redact(str(e), secrets),
                              error_kind=str(ErrorKind.FATAL), attempts=0)
        self._warn_near_misses(params, client)
        start = time.monotonic()
        sem = provider_semaphore(f"{self.provider}@{self.base_url}", self.max_concurrency)

        def classify(exc: BaseException) -> ErrorInfo:  # redacted before anything logs the message
            info = self.classify(exc)
            return dataclasses.replace(info, message=redact(info.message, secrets))

        outcome = await call_with_retries(lambda: self._complete(client, messages, params), classify,
                                          self.retry_policy, semaphore=sem, label=self.name)
        latency_s = time.monotonic() - start
        if outcome.error is not None or outcome.value is None:
            err = outcome.error or ErrorInfo(ErrorKind.FATAL, "no response")
            return Generation(text="", code=None, model=self.model, latency_s=latency_s,
                              error=redact(f"{self.name}: {err.message}", secrets)[:2000],
                              error_kind=str(err.kind), attempts=outcome.attempts)
        reply = outcome.value
        price = self.config.price_for(self.name, self.spec)
        cost = price.cost_usd(reply.input_tokens, reply.output_tokens, reply.cached_tokens) if price else None
        text = redact(reply.text, secrets)
        log.debug("%s: reply of %d chars, %s in / %s out tokens, %.2f s, finish=%s", self.name, len(text),
                  reply.input_tokens, reply.output_tokens, latency_s, reply.finish_reason)
        return Generation(
            text=text,
            code=extract_code(text),
            model=reply.model or self.model,
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
            cached_tokens=reply.cached_tokens,
            reasoning_tokens=reply.reasoning_tokens,
            latency_s=latency_s,
            cost_usd=cost,
            attempts=outcome.attempts,
        )


def _error_code(body: Any) -> str:
    """The ``code``/``type`` of a provider error body (``{"error": {"code": ...}}`` or flat)."""
    if not isinstance(body, dict):
        return ""
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    for k in ("code", "type"):
        v = inner.get(k)
        if isinstance(v, str) and v:
            return v
    return ""


def system_and_turns(messages: list[dict[str, str]]) -> tuple[str, list[dict[str, str]]]:
    """Split chat messages into the joined system text and the user/assistant turns."""
    system = "\n\n".join(m["content"] for m in messages if m.get("role") == "system")
    turns = [{"role": m["role"], "content": m["content"]} for m in messages if m.get("role") != "system"]
    return system, turns
