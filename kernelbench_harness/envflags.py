"""On/off environment switches (``KBENCH_DEVSHARE``, ``KBENCH_MEMORY_LEDGER``): one reading for all."""

from __future__ import annotations

import os

__all__ = ["env_switch"]

_ON = ("1", "true", "on", "yes")
_OFF = ("0", "false", "off", "no")


def env_switch(name: str, *, default: bool = True, expected: str = "expected 0 or 1") -> bool:
    """The switch ``name``: unset or empty gives ``default``; ``1``, ``true``, ``on``, ``yes`` (any case)
    give True; ``0``, ``false``, ``off``, ``no`` give False.

    Raises:
        ValueError: any other value (its message names the variable, the value and ``expected``).
    """
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in _ON:
        return True
    if raw in _OFF:
        return False
    raise ValueError(f"{name}={raw!r}: {expected}")
