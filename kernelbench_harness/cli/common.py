"""Options and helpers shared by CLI commands."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import click
from rich.console import Console, RenderableType
from rich.measure import Measurement

from ..errors import ConfigError
from ..executors import parse_gpus

__all__ = [
    "FiniteFloatRange",
    "check_problems_source",
    "db_option",
    "ids_option",
    "level_option",
    "parse_gpus",
    "parse_kv",
    "parse_levels",
    "print_full",
    "problems_option",
    "unbounded",
]

# widest line print_full lays a table out on when stdout is not a terminal (a guard, not a layout width)
_MAX_WIDTH = 10_000


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


class FiniteFloatRange(click.FloatRange):
    """:class:`click.FloatRange` that also refuses ``nan`` and ``inf``.

    click parses both as floats, and its range check lets ``nan`` through (every comparison with it is
    false): ``kbench problems audit --timeout nan`` recorded every problem as skipped-time, and
    ``--timeout inf`` ended in an OverflowError.

    Args:
        hint: the fix shown after the error, e.g. ``"give seconds, e.g. --timeout 300"``.
        *args, **kwargs: as for :class:`click.FloatRange`.
    """

    def __init__(self, *args: Any, hint: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hint = hint

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number; {self.hint}", param, ctx)
        return rv


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


def parse_kv(pairs: tuple[str, ...], what: str, example: str = "temperature=0.2") -> dict[str, Any]:
    """``("temperature=0.2", "max_tokens=4096")`` -> dict with ints/floats/bools coerced.

    Args:
        what: how the flag's values are named in errors (``"-M value"``).
        example: a ``key=value`` for this flag, shown in the fix.

    Raises:
        ConfigError: an item without ``=``, or one key given twice.
    """
    out: dict[str, Any] = {}
    for p in pairs:
        if "=" not in p:
            raise ConfigError(f"bad {what} {p!r}", fix=f"write {what} as key=value, e.g. {example}")
        k, v = p.split("=", 1)
        k = k.strip()
        if k in out:
            raise ConfigError(f"{what} {k} given twice ({k}={out[k]!r} and {p!r})", fix=f"give {k} once")
        out[k] = _coerce(v.strip())
    return out


def check_problems_source(spec: str | None) -> None:
    """Fail early when ``--problems`` names a path that does not exist.

    Only the path is checked (None, ``bundled`` and ``hf:...`` pass): loading is left to the caller.

    Raises:
        ConfigError: the file or folder does not exist; the fix lists the accepted sources.
    """
    if spec is None or spec == "bundled" or spec.startswith("hf:"):
        return
    if not Path(spec).expanduser().exists():
        raise ConfigError(f"--problems {spec!r}: no such file or folder",
                          fix="pass a KernelBench folder (path/to/KernelBench), a .jsonl or .parquet file, or "
                              "hf:ScalingIntelligence/KernelBench; leave --problems out for the bundled suite")


def unbounded(console: Console) -> bool:
    """Whether ``console`` writes to a pipe or file with no width asked for ($COLUMNS unset).

    There nothing wraps lines, so tables are printed at their natural width (:func:`print_full`).
    """
    return not console.is_terminal and not os.environ.get("COLUMNS", "").strip()


def print_full(console: Console, renderable: RenderableType) -> None:
    """Print a table (or a panel holding one) without cutting or folding its cells when nothing wraps.

    On a terminal, or when $COLUMNS is set, this is ``console.print``: rich fits the table to that
    width. Piped to a file, ``less`` or a CI log, rich would assume 80 columns and ellipsize long run
    and model names; there the table is laid out at its natural width instead.
    """
    if not unbounded(console):
        console.print(renderable)
        return
    natural = Measurement.get(console, console.options.update(max_width=_MAX_WIDTH), renderable).maximum
    width = console.width
    if natural <= width:
        console.print(renderable)
        return
    console.width = natural
    try:
        console.print(renderable)
    finally:
        console.width = width  # a console without a terminal has a fixed width: restoring it is exact


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
