"""Shared test setup: ``tests/`` is importable (``from fakes import FakeOpenAIServer``) and the
fake provider servers' fixtures (``openai_server``, ``anthropic_server``, ``gemini_server``) are loaded."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

pytest_plugins = ["fakes.fixtures"]

import os  # noqa: E402

# Precompiled headers cost ~45 CPU seconds each and are built in the background after the first
# C++ build; tests that merely build an extension would pay for one they never use.
# tests/pipeline/test_build_pch.py turns them back on.
os.environ.setdefault("KBENCH_PCH", "0")
