"""Gemini API generateContent (official ``google-genai`` SDK): ``google/<model>``.

Key from ``GOOGLE_API_KEY`` or ``GEMINI_API_KEY``; base URL from the ``base_url`` option or
``GOOGLE_GEMINI_BASE_URL``. System messages become the ``system_instruction``; assistant turns the
``model`` role. Model arguments: ``max_tokens`` (-> ``max_output_tokens``), ``reasoning_effort``
(-> ``thinking_config.thinking_level``: minimal/low/medium/high), ``thinking_budget``
(-> ``thinking_config.thinking_budget``), and any field of ``GenerateContentConfig``
(``temperature``, ``top_p``, ``top_k``, ``seed``, ``stop_sequences``...). An unknown argument is a
fatal error of the request (the Gemini API rejects unknown fields).
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from ..errors import ConfigError
from .chat import NEAR_MISS_CUTOFF, ChatAdapter, Reply, system_and_turns
from .retry import ErrorInfo, ErrorKind

__all__ = ["GoogleAdapter"]


class GoogleAdapter(ChatAdapter):
    """``POST {base_url}/v1beta/models/{model}:generateContent`` through ``google.genai.Client().aio``."""

    provider = "google"
    sdk_module = "google.genai"
    extra = "google"
    key_envs = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
    base_url_envs = ("GOOGLE_GEMINI_BASE_URL",)
    default_base_url = None

    def _make_client(self, sdk: Any) -> Any:
        types = sdk.types
        http = types.HttpOptions(
            base_url=self.base_url or None,
            timeout=int(self.timeout_s * 1000),  # milliseconds
            retry_options=types.HttpRetryOptions(attempts=1),  # kbench retries
        )
        return sdk.Client(api_key=self._api_key, http_options=http)

    def _config(self, types: Any, system: str, params: dict[str, Any]) -> Any:
        params = dict(params)
        if "max_tokens" in params:
            params["max_output_tokens"] = params.pop("max_tokens")
        thinking: dict[str, Any] = dict(params.pop("thinking_config", None) or {})
        effort = params.pop("reasoning_effort", None)
        if effort is not None:
            thinking["thinking_level"] = str(effort).upper()
        budget = params.pop("thinking_budget", None)
        if budget is not None:
            thinking["thinking_budget"] = int(budget)
        if thinking:
            params["thinking_config"] = types.ThinkingConfig(**thinking)
        fields = set(types.GenerateContentConfig.model_fields)
        unknown = sorted(set(params) - fields)
        if unknown:
            keys = sorted(fields | {"max_tokens", "reasoning_effort", "thinking_budget"})
            near = {k: m[0] for k in unknown
                    if (m := difflib.get_close_matches(k, keys, n=1, cutoff=NEAR_MISS_CUTOFF))}
            hint = "".join(f"; did you mean {m!r} for {k!r}?" for k, m in near.items())
            raise ConfigError(f"unknown Gemini model argument(s) {unknown}{hint}",
                              fix="use fields of GenerateContentConfig, max_tokens or reasoning_effort")
        if system:
            params["system_instruction"] = system
        # kbench sends no tools; switching automatic function calling off also silences its INFO line
        params.setdefault("automatic_function_calling", types.AutomaticFunctionCallingConfig(disable=True))
        return types.GenerateContentConfig(**params)

    async def _complete(self, client: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> Reply:
        from google.genai import types

        system, turns = system_and_turns(messages)
        contents = [types.Content(role="model" if m["role"] == "assistant" else "user",
                                  parts=[types.Part(text=m["content"])]) for m in turns]
        resp = await client.aio.models.generate_content(model=self.model, contents=contents,
                                                        config=self._config(types, system, params))
        text = ""
        finish = ""
        if resp.candidates:
            cand = resp.candidates[0]
            finish = str(getattr(cand.finish_reason, "value", cand.finish_reason) or "")
            parts = (cand.content.parts if cand.content else None) or []
            text = "".join(p.text for p in parts if p.text and not p.thought)
        u = resp.usage_metadata
        out = None
        if u is not None and (u.candidates_token_count is not None or u.thoughts_token_count is not None):
            out = (u.candidates_token_count or 0) + (u.thoughts_token_count or 0)
        return Reply(text=text, model=resp.model_version or self.model,
                     input_tokens=u.prompt_token_count if u else None, output_tokens=out,
                     cached_tokens=u.cached_content_token_count if u else None,
                     reasoning_tokens=u.thoughts_token_count if u else None, finish_reason=finish)

    def classify(self, exc: BaseException) -> ErrorInfo:
        common = self._classify_common(exc)
        if common is not None:
            return common
        if isinstance(exc, ConfigError):
            return ErrorInfo(ErrorKind.FATAL, str(exc))
        from google.genai import errors

        if isinstance(exc, errors.APIError):
            headers = getattr(getattr(exc, "response", None), "headers", None)
            status = int(exc.code) if exc.code else 0
            if status:
                return self._status_info(status, str(exc.message or exc.status or exc), headers,
                                         body=exc.details)
            return ErrorInfo(ErrorKind.FATAL, str(exc))
        for http_module in ("httpx", "httpx2"):  # whichever HTTP client the SDK release uses
            try:
                mod = importlib.import_module(http_module)
            except ImportError:
                continue
            if isinstance(exc, mod.TransportError):
                return ErrorInfo(ErrorKind.TRANSIENT, f"{type(exc).__name__}: {exc}")
        name = type(exc).__name__
        if "Timeout" in name or "Connect" in name:  # other HTTP clients the SDK may use (aiohttp)
            return ErrorInfo(ErrorKind.TRANSIENT, f"{name}: {exc}")
        return ErrorInfo(ErrorKind.FATAL, f"{name}: {exc}")
