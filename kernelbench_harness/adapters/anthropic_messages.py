"""Anthropic Messages API (official ``anthropic`` SDK): ``anthropic/<model>``.

Key from ``ANTHROPIC_API_KEY``, base URL from ``ANTHROPIC_BASE_URL``. System messages go to the
``system`` parameter. Model arguments: ``max_tokens`` (default 16000; the API requires one),
``temperature``, ``top_p``, ``top_k``, ``stop_sequences``, ``thinking`` (a dict) or the shorthand
``thinking_budget=N`` (extended thinking with N budget tokens); other arguments the SDK's
``messages.create`` accepts pass as such, the rest go in the request body.
"""

from __future__ import annotations

import inspect
from typing import Any

from .chat import ChatAdapter, Reply, system_and_turns
from .retry import ErrorInfo, ErrorKind

__all__ = ["AnthropicAdapter"]

DEFAULT_MAX_TOKENS = 16000


class AnthropicAdapter(ChatAdapter):
    """``POST {base_url}/v1/messages`` through ``anthropic.AsyncAnthropic`` (SDK retries off)."""

    provider = "anthropic"
    sdk_module = "anthropic"
    extra = "anthropic"
    key_envs = ("ANTHROPIC_API_KEY",)
    base_url_envs = ("ANTHROPIC_BASE_URL",)
    default_base_url = None  # the SDK's default endpoint
    # the sampling parameters of the Messages API (some SDK versions take them in the body only) and the shorthand
    server_params = frozenset({"temperature", "top_p", "top_k", "stop_sequences", "thinking_budget"})
    _create_params: frozenset[str] | None = None

    def _make_client(self, sdk: Any) -> Any:
        kwargs: dict[str, Any] = {"api_key": self._api_key, "timeout": self.timeout_s, "max_retries": 0}
        if self.base_url:
            kwargs["base_url"] = self.base_url
        return sdk.AsyncAnthropic(**kwargs)

    def _known_params(self, client: Any) -> frozenset[str]:
        if type(self)._create_params is None:
            sig = inspect.signature(client.messages.create)
            type(self)._create_params = frozenset(
                p for p in sig.parameters if p not in ("messages", "model", "system", "stream"))
        return type(self)._create_params  # type: ignore[return-value]

    async def _complete(self, client: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> Reply:
        system, turns = system_and_turns(messages)
        params = dict(params)
        budget = params.pop("thinking_budget", None)
        if budget is not None:
            params["thinking"] = {"type": "enabled", "budget_tokens": int(budget)}
        params.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        known = self._known_params(client)
        kwargs = {k: v for k, v in params.items() if k in known}
        extra = {k: v for k, v in params.items() if k not in known}
        if extra:
            kwargs["extra_body"] = {**extra, **(kwargs.get("extra_body") or {})}
        if system:
            kwargs["system"] = system
        resp = await client.messages.create(model=self.model, messages=turns, **kwargs)
        text = "".join(getattr(b, "text", "") for b in resp.content if getattr(b, "type", "") == "text")
        u = resp.usage
        cache_read = getattr(u, "cache_read_input_tokens", None) if u else None
        cache_write = getattr(u, "cache_creation_input_tokens", None) if u else None
        # Anthropic's input_tokens excludes cache reads and writes; kbench counts all input tokens.
        total_in = (u.input_tokens + (cache_read or 0) + (cache_write or 0)) if u else None
        return Reply(text=text, model=resp.model or self.model, input_tokens=total_in,
                     output_tokens=u.output_tokens if u else None, cached_tokens=cache_read,
                     finish_reason=resp.stop_reason or "")

    def classify(self, exc: BaseException) -> ErrorInfo:
        common = self._classify_common(exc)
        if common is not None:
            return common
        import anthropic

        if isinstance(exc, (anthropic.APITimeoutError, anthropic.APIConnectionError)):
            return ErrorInfo(ErrorKind.TRANSIENT, f"{type(exc).__name__}: {exc}")
        if isinstance(exc, anthropic.APIStatusError):
            info = self._status_info(exc.status_code, str(getattr(exc, "message", exc)), exc.response.headers,
                                     body=exc.body)
            if "overloaded_error" in str(exc.body):
                return ErrorInfo(ErrorKind.OVERLOADED, info.message, info.status, info.retry_after_s)
            return info
        return ErrorInfo(ErrorKind.FATAL, f"{type(exc).__name__}: {exc}")
