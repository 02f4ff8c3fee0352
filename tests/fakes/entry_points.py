"""A third-party-style adapter factory, for testing the ``kernelbench_harness.adapters`` entry-point group."""

from __future__ import annotations

from typing import Any

from kernelbench_harness.adapters.scripted import ScriptedAdapter


def make_adapter(model: str, options: dict[str, Any]) -> ScriptedAdapter:
    """``factory(model, options) -> ModelAdapter``: the contract of the entry-point group."""
    return ScriptedAdapter([options.get("reply", "no code")], name=f"echo/{model}")
