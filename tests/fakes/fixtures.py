"""pytest fixtures: one started fake server per test (loaded by ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .providers import FakeAnthropicServer, FakeGeminiServer, FakeOpenAIServer


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    """An OpenAI-compatible server (no key required) answering with ``DEFAULT_REPLY``; set ``.script``."""
    with FakeOpenAIServer(model="fake-policy") as srv:
        yield srv


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(model="claude-fake") as srv:
        yield srv


@pytest.fixture
def gemini_server() -> Iterator[FakeGeminiServer]:
    with FakeGeminiServer(model="gemini-fake") as srv:
        yield srv
