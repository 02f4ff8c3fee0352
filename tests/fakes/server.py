"""Small real HTTP servers that speak model providers' wire protocols, for offline tests.

Each server listens on 127.0.0.1 (a free port) in a daemon thread, records every request it gets,
and answers generation requests from a *script*:

- a string: always that reply;
- a list of strings: reply ``script[turn]`` where ``turn`` is the number of assistant messages in
  the request's conversation (so turn 0, 1, 2 of every sample get items 0, 1, 2 however samples
  interleave); the last item repeats past the end. With ``order=True`` the list is served in the
  order requests arrive instead;
- a dict: the reply whose key (a marker) appears in the last user message; key ``"*"`` is the
  default;
- a callable ``(request_body: dict) -> str | FakeResponse``.

Responses queued with :meth:`FakeServer.enqueue` (errors, delays) are served first, in order.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["DEFAULT_REPLY", "FakeResponse", "FakeServer", "RecordedRequest", "Script"]

DEFAULT_REPLY = """Here is my kernel.

```python
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        return inputs[0]
```
"""


@dataclass
class FakeResponse:
    """One HTTP response: ``body`` is JSON-encoded unless it is ``str``/``bytes``."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the server received it (header names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received_s: float  # time.monotonic() on arrival

    @property
    def last_user_text(self) -> str:
        return _last_user_text(self.body)


Script = str | Sequence[str] | Mapping[str, str] | Callable[[Any], "str | FakeResponse"] | None


def _content_text(content: Any) -> str:
    """Text of an OpenAI / Anthropic message content (string or list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _last_user_text(body: Any) -> str:
    if not isinstance(body, dict):
        return ""
    if "contents" in body:  # Gemini
        for c in reversed(body["contents"]):
            if c.get("role", "user") == "user":
                return "".join(p.get("text", "") for p in c.get("parts", []))
        return ""
    for m in reversed(body.get("messages", [])):
        if m.get("role") == "user":
            return _content_text(m.get("content"))
    return ""


class FakeServer:
    """Base of the fake provider servers; subclasses implement :meth:`handle`.

    Args:
        script: how generation requests are answered (see the module docstring).
        api_key: when set, requests without this key get a 401 in the provider's error format.
        model: the model name the server reports.
        delay_s: seconds each generation request takes (to observe concurrency).
        order: serve a list script in arrival order instead of by turn.
    """

    def __init__(self, script: Script = None, *, api_key: str | None = None, model: str = "fake-model",
                 delay_s: float = 0.0, order: bool = False) -> None:
        self.script = DEFAULT_REPLY if script is None else script
        self.api_key = api_key
        self.model = model
        self.delay_s = delay_s
        self.order = order
        self._lock = threading.Lock()
        self._queue: deque[FakeResponse] = deque()
        self._requests: list[RecordedRequest] = []
        self._served = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self, port: int = 0) -> FakeServer:
        """Listen on 127.0.0.1:``port`` (0: a free port) in a daemon thread."""
        handler = _make_handler(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name=f"{type(self).__name__}")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The base URL an SDK client is given (provider-specific)."""
        return self.url

    # --- scripting -------------------------------------------------------------------------------
    def enqueue(self, *responses: FakeResponse) -> None:
        """Serve these responses to the next generation requests, before the script."""
        with self._lock:
            self._queue.extend(responses)

    def error(self, status: int, message: str = "error", *, retry_after: str | None = None) -> FakeResponse:
        """A provider-shaped error response (subclasses shape the body)."""
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return FakeResponse(status, {"error": {"message": message}}, headers)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def generation_requests(self) -> list[RecordedRequest]:
        """The requests that asked for a reply (not model listings)."""
        return [r for r in self.requests if r.method == "POST"]

    def reply_text(self, body: Any) -> str | FakeResponse:
        """The scripted reply for a generation request ``body``."""
        s = self.script
        if callable(s):
            return s(body)
        if isinstance(s, str):
            return s
        if isinstance(s, Mapping):
            last = _last_user_text(body)
            for marker, reply in s.items():
                if marker != "*" and marker in last:
                    return reply
            if "*" in s:
                return s["*"]
            raise KeyError(f"no scripted reply for a message containing none of {list(s)}")
        items = list(s)
        if self.order:
            with self._lock:
                idx = self._served
                self._served += 1
        else:
            idx = self.turn_of(body)
        return items[min(idx, len(items) - 1)]

    def turn_of(self, body: Any) -> int:
        """Turn index of a request: the number of assistant messages in its conversation."""
        if not isinstance(body, dict):
            return 0
        if "contents" in body:
            return sum(1 for c in body["contents"] if c.get("role") == "model")
        return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")

    # --- protocol (subclasses) -------------------------------------------------------------------
    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> FakeResponse:
        raise NotImplementedError

    def generation(self, body: Any, render: Callable[[str], FakeResponse]) -> FakeResponse:
        """Serve a generation request: queued response, else ``render(scripted text)``."""
        with self._lock:
            queued = self._queue.popleft() if self._queue else None
        if queued is not None:
            return queued
        reply = self.reply_text(body)
        if isinstance(reply, FakeResponse):
            return reply
        if self.delay_s:
            return FakeResponse(200, render(reply).body, delay_s=self.delay_s)
        return render(reply)

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(req)


def _make_handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            headers = {k.lower(): v for k, v in self.headers.items()}
            server._record(RecordedRequest(self.command, self.path, headers, body, time.monotonic()))
            with server._lock:
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                resp = server.handle(self.command, self.path, headers, body)
                if resp.delay_s:
                    time.sleep(resp.delay_s)
            except Exception as e:  # noqa: BLE001 - a broken script is the test's bug: answer 500 and say why
                resp = FakeResponse(500, {"error": {"message": f"fake server: {type(e).__name__}: {e}"}})
            finally:
                with server._lock:
                    server.in_flight -= 1
            data = resp.body if isinstance(resp.body, bytes) else (
                resp.body.encode() if isinstance(resp.body, str) else json.dumps(resp.body).encode())
            self.send_response(resp.status)
            ctype = "text/plain" if isinstance(resp.body, (str, bytes)) else "application/json"
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in resp.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        do_GET = _serve
        do_POST = _serve

    return Handler


def count_tokens(text: str) -> int:
    """The fake servers' token count: one token per 4 characters, at least 1."""
    return max(1, len(text) // 4)
