"""JSON encoding that PostgreSQL accepts: non-finite floats become strings and come back as floats.

PostgreSQL's ``json`` type rejects the ``NaN`` / ``Infinity`` tokens Python's :mod:`json` writes, and
SQLite turns a NaN ``REAL`` into NULL; a candidate whose output holds NaN legitimately has
``max_abs_err = nan``. Such floats are written as the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"`` and turned back into floats where a float is expected (:func:`restore_float`).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from typing import Any

__all__ = ["dumps", "jsonable", "loads", "restore_float"]

_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def jsonable(obj: Any) -> Any:
    """A copy of ``obj`` made of dicts, lists, str, int, finite float, bool and None.

    Non-finite floats become ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"``; tuples and sets become
    lists; enums their values; dataclasses their fields; anything else its ``str``.
    """
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj.value if isinstance(obj, enum.Enum) else obj
    if isinstance(obj, float):
        if math.isnan(obj):
            return "NaN"
        if math.isinf(obj):
            return "Infinity" if obj > 0 else "-Infinity"
        return obj
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return jsonable(obj.value)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    if hasattr(obj, "item"):  # numpy scalars
        try:
            return jsonable(obj.item())
        except (TypeError, ValueError):
            pass
    return str(obj)


def dumps(obj: Any) -> str:
    """``json.dumps`` of :func:`jsonable` ``(obj)``: valid JSON for every database."""
    return json.dumps(jsonable(obj), allow_nan=False, ensure_ascii=False)


def loads(text: str) -> Any:
    """``json.loads``; the inverse of :func:`dumps` up to the float-string mapping."""
    return json.loads(text)


def restore_float(value: Any) -> float | None:
    """``value`` as a float where it was a float before :func:`jsonable` (None stays None)."""
    if value is None:
        return None
    if isinstance(value, str):
        return _NONFINITE.get(value, math.nan)
    return float(value)
