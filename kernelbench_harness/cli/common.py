"""Options and helpers shared by CLI commands."""

from __future__ import annotations

import re
from typing import Any

import click

from ..errors import ConfigError

__all__ = ["parse_levels", "parse_kv", "db_option", "problems_option", "level_option", "ids_option"]


def parse_levels(spec: str | None) -> tuple[int, ...] | None:
    """``"1"``, ``"1-3"``, ``"1,3"`` or None/"all" -> levels.

    Raises:
        ConfigError: on anything else.
    """
    if spec is None or spec.strip() in ("", "all"):
        return None
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi:
                raise ConfigError(f"bad --level range {part!r}: it is empty", fix=f"write it low-high, e.g. {hi}-{lo}")
            out.update(range(lo, hi + 1))
        elif part.isdigit():
            out.add(int(part))
        else:
            raise ConfigError(f"bad --level value {spec!r}", fix="use a level like 1, a range like 1-3, or 1,3")
    if 0 in out:
        raise ConfigError(f"bad --level value {spec!r}: levels start at 1 (KernelBench has levels 1-4)",
                          fix="use a level like 1, a range like 1-3, or 1,3")
    return tuple(sorted(out))


def _coerce(v: str) -> Any:
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def parse_kv(pairs: tuple[str, ...], what: str) -> dict[str, Any]:
    """``("temperature=0.2", "max_tokens=4096")`` -> dict with ints/floats/bools coerced.

    Raises:
        ConfigError: an item without ``=``.
    """
    out: dict[str, Any] = {}
    for p in pairs:
        if "=" not in p:
            raise ConfigError(f"bad {what} {p!r}", fix=f"write {what} as key=value, e.g. temperature=0.2")
        k, v = p.split("=", 1)
        out[k.strip()] = _coerce(v.strip())
    return out


db_option = click.option("--db", "db", default=None, metavar="URL",
                         help="Results store: an SQLAlchemy URL (postgresql+psycopg://...) or an SQLite path. "
                              "Default: sqlite:///results/kbench.db")
problems_option = click.option("--problems", "problems", default=None, metavar="SOURCE",
                               help="Problem source: a KernelBench-layout folder (level1/1_Name.py ...), a .jsonl "
                                    "or .parquet file, or hf:ScalingIntelligence/KernelBench. Default: the bundled "
                                    "suite.")
level_option = click.option("--level", "level", default=None, metavar="LEVELS",
                            help="Levels to include: 1, 1-3 or 1,3 (default: all).")
ids_option = click.option("--ids", "ids", default=None, metavar="IDS",
                          help="Problem ids to include: 1-10,15 (default: all).")
