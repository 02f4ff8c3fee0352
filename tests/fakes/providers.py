"""Fake servers for the OpenAI chat-completions, Anthropic messages and Gemini generateContent APIs."""

from __future__ import annotations

import itertools
import re
from typing import Any

from .server import FakeResponse, FakeServer, count_tokens

__all__ = ["FakeAnthropicServer", "FakeGeminiServer", "FakeOpenAIServer"]

_ids = itertools.count(1)


def _messages_text(messages: list[dict[str, Any]]) -> str:
    out = []
    for m in messages or []:
        c = m.get("content")
        out.append(c if isinstance(c, str) else "".join(p.get("text", "") for p in c or [] if isinstance(p, dict)))
    return "".join(out)


class FakeOpenAIServer(FakeServer):
    """OpenAI-compatible server (as vLLM / SGLang serve): ``POST /v1/chat/completions``, ``GET /v1/models``.

    ``base_url`` is ``http://127.0.0.1:PORT/v1``. Usage counts: one token per 4 characters; with
    ``cached_tokens``/``reasoning_tokens`` set, those are reported in the usage details.
    """

    cached_tokens: int | None = None
    reasoning_tokens: int | None = None

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def error(self, status: int, message: str = "error", *, retry_after: str | None = None,
              code: str | None = None) -> FakeResponse:
        kind = {429: "rate_limit_exceeded", 401: "invalid_request_error", 400: "invalid_request_error"}
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return FakeResponse(status, {"error": {"message": message, "type": kind.get(status, "server_error"),
                                               "param": None, "code": code}}, headers)

    def _authorized(self, headers: dict[str, str]) -> bool:
        return self.api_key is None or headers.get("authorization") == f"Bearer {self.api_key}"

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> FakeResponse:
        path = path.split("?")[0].rstrip("/")
        if not self._authorized(headers):
            return self.error(401, "Incorrect API key provided.", code="invalid_api_key")
        if method == "GET" and path == "/v1/models":
            return FakeResponse(200, {"object": "list", "data": [
                {"id": self.model, "object": "model", "created": 0, "owned_by": "kbench-fake"}]})
        if method == "POST" and path == "/v1/chat/completions":
            prompt = _messages_text(body.get("messages", []))

            def render(text: str) -> FakeResponse:
                usage: dict[str, Any] = {"prompt_tokens": count_tokens(prompt),
                                         "completion_tokens": count_tokens(text)}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                if self.cached_tokens is not None:
                    usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
                if self.reasoning_tokens is not None:
                    usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
                return FakeResponse(200, {
                    "id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": 0,
                    "model": body.get("model") or self.model,
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": usage,
                })

            return self.generation(body, render)
        return self.error(404, f"no route {method} {path}")


class FakeAnthropicServer(FakeServer):
    """Anthropic Messages API: ``POST /v1/messages`` (``base_url`` is ``http://127.0.0.1:PORT``)."""

    cache_read_tokens: int | None = None

    def error(self, status: int, message: str = "error", *, retry_after: str | None = None) -> FakeResponse:
        kind = {429: "rate_limit_error", 401: "authentication_error", 400: "invalid_request_error",
                529: "overloaded_error", 500: "api_error"}
        headers = {"retry-after": retry_after} if retry_after is not None else {}
        return FakeResponse(status, {"type": "error", "error": {"type": kind.get(status, "api_error"),
                                                                "message": message}}, headers)

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> FakeResponse:
        path = path.split("?")[0].rstrip("/")
        # the API takes the key as x-api-key; newer SDKs send it as a bearer token
        sent = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        if self.api_key is not None and sent != self.api_key:
            return self.error(401, "invalid x-api-key")
        if method == "POST" and path == "/v1/messages":
            system = body.get("system") or ""
            prompt = (system if isinstance(system, str) else _messages_text([{"content": system}])) \
                + _messages_text(body.get("messages", []))

            def render(text: str) -> FakeResponse:
                usage = {"input_tokens": count_tokens(prompt), "output_tokens": count_tokens(text)}
                if self.cache_read_tokens is not None:
                    usage["cache_read_input_tokens"] = self.cache_read_tokens
                return FakeResponse(200, {
                    "id": f"msg_{next(_ids)}", "type": "message", "role": "assistant",
                    "model": body.get("model") or self.model,
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn", "stop_sequence": None, "usage": usage,
                })

            return self.generation(body, render)
        return self.error(404, f"no route {method} {path}")


class FakeGeminiServer(FakeServer):
    """Gemini API: ``POST /{v1beta|v1}/models/{model}:generateContent`` (``base_url`` is the bare URL;
    the SDK picks the API version)."""

    thoughts_tokens: int | None = None
    _route = re.compile(r"^/(v1|v1beta|v1alpha)/models/(?P<model>[^:/]+):generateContent$")

    def error(self, status: int, message: str = "error", *, retry_after: str | None = None) -> FakeResponse:
        kind = {429: "RESOURCE_EXHAUSTED", 401: "UNAUTHENTICATED", 400: "INVALID_ARGUMENT",
                403: "PERMISSION_DENIED", 503: "UNAVAILABLE", 500: "INTERNAL"}
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return FakeResponse(status, {"error": {"code": status, "message": message,
                                               "status": kind.get(status, "UNKNOWN")}}, headers)

    def turn_of(self, body: Any) -> int:
        return sum(1 for c in (body or {}).get("contents", []) if c.get("role") == "model")

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> FakeResponse:
        route, _, query = path.partition("?")
        key = headers.get("x-goog-api-key") or dict(
            kv.split("=", 1) for kv in query.split("&") if "=" in kv).get("key")
        if self.api_key is not None and key != self.api_key:
            return self.error(401, "API key not valid. Please pass a valid API key.")
        m = self._route.match(route)
        if method == "POST" and m:
            sys_parts = ((body.get("systemInstruction") or body.get("system_instruction") or {}).get("parts")
                         or [])
            prompt = "".join(p.get("text", "") for p in sys_parts) + "".join(
                p.get("text", "") for c in body.get("contents", []) for p in c.get("parts", []))

            def render(text: str) -> FakeResponse:
                usage = {"promptTokenCount": count_tokens(prompt), "candidatesTokenCount": count_tokens(text)}
                if self.thoughts_tokens is not None:
                    usage["thoughtsTokenCount"] = self.thoughts_tokens
                usage["totalTokenCount"] = sum(usage.values())
                return FakeResponse(200, {
                    "candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                    "finishReason": "STOP", "index": 0}],
                    "usageMetadata": usage, "modelVersion": m.group("model"),
                })

            return self.generation(body, render)
        return self.error(404, f"no route {method} {path}")
