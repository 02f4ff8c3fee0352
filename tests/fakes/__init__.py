"""Offline stand-ins for model providers: real HTTP servers speaking each provider's wire protocol.

Usable from any test (``tests/conftest.py`` puts ``tests/`` on ``sys.path``)::

    from fakes import FakeOpenAIServer

    with FakeOpenAIServer(["turn 0 reply", "turn 1 reply"], model="policy") as srv:
        monkeypatch.setenv("KBENCH_CUDA_AGENT_BASE_URL", srv.base_url)
        ...                                    # kbench run --model cuda-agent --turns 2
        assert len(srv.generation_requests()) == 2

Fixtures ``openai_server``, ``anthropic_server`` and ``gemini_server`` (started, stopped after the test)
come from :mod:`fakes.fixtures`.
"""

from .providers import FakeAnthropicServer, FakeGeminiServer, FakeOpenAIServer
from .server import DEFAULT_REPLY, FakeResponse, FakeServer, RecordedRequest, count_tokens

__all__ = [
           "DEFAULT_REPLY",
           "FakeAnthropicServer",
           "FakeGeminiServer",
           "FakeOpenAIServer",
           "FakeResponse",
           "FakeServer",
           "RecordedRequest",
           "count_tokens",
]
