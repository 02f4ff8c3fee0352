"""Each provider adapter over real HTTP against a local server speaking that provider's protocol."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

import pytest
from fakes import DEFAULT_REPLY, FakeAnthropicServer, FakeGeminiServer, FakeOpenAIServer, FakeServer

from kernelbench_harness.adapters import GenerationRequest, SampleSpec, get_adapter
from kernelbench_harness.config import KbenchConfig, Price
from kernelbench_harness.core import Problem

KEY = "sk-kbench-test-0123456789abcdef"
PROBLEM = Problem(1, 1, "Identity", "class Model: pass\n")
MESSAGES = ({"role": "system", "content": "SYSTEM-TEXT"}, {"role": "user", "content": "USER-TEXT please"})


@dataclass(frozen=True)
class Prov:
    name: str
    server_cls: type[FakeServer]
    spec: str
    key_env: str
    base_url_env: str


PROVIDERS = [
    Prov("openai", FakeOpenAIServer, "openai/gpt-test", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    Prov("anthropic", FakeAnthropicServer, "anthropic/claude-test", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    Prov("google", FakeGeminiServer, "google/gemini-test", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL"),
]
IDS = [p.name for p in PROVIDERS]


@pytest.fixture(params=PROVIDERS, ids=IDS)
def prov(request, monkeypatch):
    """A started fake server for one provider, with the provider's env vars pointing at it."""
    p: Prov = request.param
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "OPENAI_BASE_URL",
                "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "KBENCH_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    with p.server_cls(api_key=KEY, model="served-model") as srv:
        monkeypatch.setenv(p.key_env, KEY)
        monkeypatch.setenv(p.base_url_env, srv.base_url)
        yield p, srv


def _adapter(p: Prov, config: KbenchConfig | None = None, **options: Any):
    return get_adapter(p.spec, options={"retry_jitter_s": 0, "retry_initial_s": 0.05, **options},
                       config=config or KbenchConfig())


def _generate(adapter, *, turn: int = 0, params: dict | None = None, messages=MESSAGES):
    req = GenerationRequest(SampleSpec(PROBLEM, adapter.name, 0), turn, messages, "cuda", params or {})

    async def go():
        try:
            return await adapter.generate(req)
        finally:
            await adapter.aclose()

    return asyncio.run(go())


def test_normal_reply(prov):
    p, srv = prov
    gen = _generate(_adapter(p), params={"temperature": 0.2, "max_tokens": 1234})
    assert gen.error == "" and gen.error_kind == ""
    assert gen.text == DEFAULT_REPLY
    assert gen.code is not None and "class ModelNew" in gen.code and "```" not in gen.code
    assert gen.attempts == 1
    assert gen.input_tokens and gen.output_tokens == len(DEFAULT_REPLY) // 4
    assert gen.latency_s > 0
    (req,) = srv.generation_requests()
    body = req.body
    # the wire format of each provider: system text placement, model name, model arguments
    if p.name == "openai":
        assert req.path == "/v1/chat/completions"
        assert body["model"] == "gpt-test" and body["messages"] == [dict(m) for m in MESSAGES]
        assert body["temperature"] == 0.2 and body["max_tokens"] == 1234
    elif p.name == "anthropic":
        assert req.path == "/v1/messages"
        assert body["model"] == "claude-test" and body["system"] == "SYSTEM-TEXT"
        assert body["messages"] == [{"role": "user", "content": "USER-TEXT please"}]
        assert body["temperature"] == 0.2 and body["max_tokens"] == 1234
    else:
        assert req.path.endswith("/models/gemini-test:generateContent")
        assert body["systemInstruction"]["parts"][0]["text"] == "SYSTEM-TEXT"
        assert body["contents"] == [{"role": "user", "parts": [{"text": "USER-TEXT please"}]}]
        assert body["generationConfig"]["temperature"] == 0.2
        assert body["generationConfig"]["maxOutputTokens"] == 1234


def test_rate_limit_with_retry_after_then_success(prov):
    p, srv = prov
    srv.enqueue(srv.error(429, "rate limited, slow down", retry_after="1"))
    t0 = time.monotonic()
    gen = _generate(_adapter(p))
    assert gen.error == "" and gen.code is not None
    assert gen.attempts == 2
    first, second = srv.generation_requests()
    assert second.received_s - first.received_s >= 1.0  # waited at least Retry-After
    assert time.monotonic() - t0 < 10


def test_fatal_error_is_not_retried(prov):
    p, srv = prov
    gen = _generate(_adapter(p, api_key="sk-wrong-key-but-long-enough"))
    assert gen.error_kind == "fatal" and "401" in gen.error
    assert gen.code is None and gen.text == ""
    assert gen.attempts == 1 and len(srv.generation_requests()) == 1
    assert "sk-wrong-key-but-long-enough" not in gen.error


def test_bad_request_400_is_fatal(prov):
    p, srv = prov
    srv.enqueue(srv.error(400, "max_tokens is too large"))
    gen = _generate(_adapter(p))
    assert gen.error_kind == "fatal" and "max_tokens is too large" in gen.error
    assert gen.attempts == 1 and len(srv.generation_requests()) == 1


def test_reply_without_code(prov):
    p, srv = prov
    srv.script = "I am sorry, I cannot write that kernel."
    gen = _generate(_adapter(p))
    assert gen.error == ""
    assert gen.text == "I am sorry, I cannot write that kernel."
    assert gen.code is None


def test_server_errors_are_retried_with_backoff(prov):
    p, srv = prov
    busy = 529 if p.name == "anthropic" else 503
    srv.enqueue(srv.error(500, "internal"), srv.error(busy, "overloaded"))
    gen = _generate(_adapter(p))
    assert gen.error == "" and gen.attempts == 3 and len(srv.generation_requests()) == 3


def test_retries_exhausted_becomes_error_not_exception(prov):
    p, srv = prov
    srv.enqueue(*[srv.error(429, "slow down", retry_after="0") for _ in range(3)])
    gen = _generate(_adapter(p, max_attempts=3))
    assert gen.error_kind == "rate_limit" and gen.attempts == 3 and gen.code is None
    assert len(srv.generation_requests()) == 3


def test_connection_refused_is_transient(prov):
    p, srv = prov
    url = srv.base_url
    srv.stop()
    gen = _generate(_adapter(p, base_url=url, max_attempts=2))
    assert gen.error_kind == "transient" and gen.attempts == 2


def test_cost_from_price_table(prov):
    p, _srv = prov
    cfg = KbenchConfig(prices={p.spec: Price(input_per_mtok=2.0, output_per_mtok=10.0)})
    gen = _generate(_adapter(p, config=cfg))
    assert gen.cost_usd == pytest.approx((gen.input_tokens * 2.0 + gen.output_tokens * 10.0) / 1e6)
    assert _generate(_adapter(p)).cost_usd is None  # no price, no cost


def test_cached_and_reasoning_tokens_are_recorded(prov):
    p, srv = prov
    if p.name == "openai":
        srv.cached_tokens, srv.reasoning_tokens = 1, 7
    elif p.name == "anthropic":
        srv.cache_read_tokens = 5
    else:
        srv.thoughts_tokens = 7
    gen = _generate(_adapter(p))
    base_out = len(DEFAULT_REPLY) // 4
    if p.name == "openai":
        assert (gen.cached_tokens, gen.reasoning_tokens) == (1, 7)
    elif p.name == "anthropic":
        assert gen.cached_tokens == 5 and gen.input_tokens >= 5  # cache reads count as input
    else:
        assert gen.reasoning_tokens == 7 and gen.output_tokens == base_out + 7  # thoughts billed as output


def test_reasoning_effort_passes_through(prov):
    p, srv = prov
    gen = _generate(_adapter(p), params={"reasoning_effort": "high"})
    assert gen.error == ""
    body = srv.generation_requests()[0].body
    if p.name == "google":
        thinking = body["generationConfig"]["thinkingConfig"]  # proto JSON: either spelling is valid
        assert thinking.get("thinkingLevel", thinking.get("thinking_level")) == "HIGH"
    else:  # OpenAI: a named argument; Anthropic: passed in the body as given
        assert body["reasoning_effort"] == "high"


def test_unknown_model_argument_goes_in_the_body_for_openai_compatible(monkeypatch):
    with FakeOpenAIServer(model="m") as srv:
        a = get_adapter("local/m", options={"base_url": srv.base_url, "top_k": 20}, config=KbenchConfig())
        gen = _generate(a)
        assert gen.error == ""
        assert srv.generation_requests()[0].body["top_k"] == 20  # default param from options


def test_misspelt_model_argument_is_warned_about_with_the_nearest_known_key(prov, caplog):
    """-O tempreature=0.6 -M max_tokns=100 went to the server unchecked, which (vLLM) ignores unknown fields and
    sampled at the wrong settings without a word."""
    p, srv = prov
    caplog.set_level(logging.WARNING)
    a = _adapter(p, tempreature=0.6, top_k=20)  # an alias's options and -O reach the adapter as options
    params = {"max_tokns": 100, "temperature": 0.2, "max_tokens": 50, "extra_body": {"top_a": 0.1}}
    gen = _generate(a, params=params)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if p.name == "google":  # the Gemini API refuses unknown fields: an error of the request, naming the nearest
        assert gen.error_kind == "fatal" and srv.generation_requests() == []
        assert "did you mean 'temperature' for 'tempreature'?" in gen.error
        assert "did you mean 'max_tokens' for 'max_tokns'?" in gen.error
        return
    assert gen.error == ""
    body = srv.generation_requests()[0].body
    # sent as given (the README: -M arguments the SDK does not name go in the request body) ...
    assert body["tempreature"] == 0.6 and body["max_tokns"] == 100 and body["top_k"] == 20
    assert body["temperature"] == 0.2 and body["max_tokens"] == 50 and body["top_a"] == 0.1
    # ... and each near-miss warned about once, with the nearest key and the way to send it on purpose
    assert sorted(warned) == sorted(
        f"{a.name}: unknown model argument {k!r} (did you mean {m!r}?) is sent to the server as given, which may "
        f"ignore it; to send it on purpose, pass it as -M 'extra_body={{{k}=...}}'"
        for k, m in (("tempreature", "temperature"), ("max_tokns", "max_tokens")))
    caplog.clear()
    assert _generate(a, params=params).error == ""
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]  # once per adapter, not per request


def test_gemini_rejects_unknown_argument_without_a_request(monkeypatch):
    with FakeGeminiServer(api_key=KEY) as srv:
        a = get_adapter("google/g", options={"base_url": srv.base_url, "api_key": KEY}, config=KbenchConfig())
        gen = _generate(a, params={"no_such_arg": 1})
        assert gen.error_kind == "fatal" and "no_such_arg" in gen.error
        assert srv.generation_requests() == []


def test_multi_turn_conversation_roles(prov):
    p, srv = prov
    msgs = MESSAGES + ({"role": "assistant", "content": "first answer"}, {"role": "user", "content": "again"})
    gen = _generate(_adapter(p), turn=1, messages=msgs)
    assert gen.error == ""
    req = srv.generation_requests()[0]
    assert srv.turn_of(req.body) == 1
    assert req.last_user_text == "again"


def test_concurrency_cap_is_honoured():
    with FakeOpenAIServer(model="m", delay_s=0.25) as srv:
        a = get_adapter("local/m", options={"base_url": srv.base_url, "max_concurrency": 2}, config=KbenchConfig())

        async def go():
            reqs = [GenerationRequest(SampleSpec(PROBLEM, a.name, i), 0, MESSAGES) for i in range(6)]
            try:
                return await asyncio.gather(*(a.generate(r) for r in reqs))
            finally:
                await a.aclose()

        t0 = time.monotonic()
        gens = asyncio.run(go())
        assert all(g.error == "" for g in gens)
        assert srv.max_in_flight == 2  # never more than the cap, and the cap is used
        assert time.monotonic() - t0 >= 3 * 0.25  # 6 requests, 2 at a time


def test_no_key_in_logs_or_generation(prov, caplog):
    """No API key value appears in any log record at INFO or DEBUG, nor in any Generation field."""
    p, srv = prov
    caplog.set_level(logging.DEBUG)
    srv.enqueue(srv.error(429, f"echoing the key {KEY}", retry_after="0"),
                srv.error(500, f"server echo {KEY}"))
    srv.script = f"reply that quotes the key {KEY}\n```python\nclass ModelNew: pass\n```"
    gens = [_generate(_adapter(p))]
    srv.enqueue(srv.error(400, f"bad request for key {KEY}"))
    gens.append(_generate(_adapter(p)))
    gens.append(_generate(_adapter(p, api_key=KEY + "-wrong")))
    assert gens[0].error == "" and gens[1].error_kind == "fatal" and gens[2].error_kind == "fatal"
    assert caplog.records, "expected log records from retries"
    for rec in caplog.records:
        assert KEY not in rec.getMessage(), rec.getMessage()
    for g in gens:
        for f in dataclasses.fields(g):
            assert KEY not in str(getattr(g, f.name)), f.name
    assert KEY not in repr(_adapter(p))


def test_missing_key_is_one_prerequisite_error(monkeypatch):
    from kernelbench_harness.errors import PrerequisiteError

    for var, spec in (("ANTHROPIC_API_KEY", "anthropic/claude-x"), ("OPENAI_API_KEY", "openai/gpt-x")):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
        a = get_adapter(spec, config=KbenchConfig())
        with pytest.raises(PrerequisiteError) as ei:
            a.check_ready()
        assert ei.value.fix == f"set {var}"
        gen = _generate(a)  # and generate() returns it as an error instead of raising
        assert gen.error_kind == "fatal" and var in gen.error
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(PrerequisiteError, match="needs an API key") as ei:
        get_adapter("google/gemini-x", config=KbenchConfig()).check_ready()
    assert ei.value.fix == "set GOOGLE_API_KEY or GEMINI_API_KEY"


def test_gemini_api_key_from_gemini_env(monkeypatch):
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    with FakeGeminiServer(api_key=KEY) as srv:
        gen = _generate(get_adapter("google/g", options={"base_url": srv.base_url}, config=KbenchConfig()))
        assert gen.error == ""
        assert srv.generation_requests()[0].headers.get("x-goog-api-key") == KEY
