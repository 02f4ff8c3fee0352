"""Shared test setup: ``tests/`` is importable (``from fakes import FakeOpenAIServer``) and the
fake provider servers' fixtures (``openai_server``, ``anthropic_server``, ``gemini_server``) are loaded."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

pytest_plugins = ["fakes.fixtures"]
