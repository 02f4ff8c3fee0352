"""Executors: where candidates are evaluated (``local``: this host's GPUs; ``ray``: a Ray cluster).

This package's own module holds only what a caller needs before any executor is imported (the executors import
torch): the ``--gpus`` syntax, checked by the CLI before a run starts and by :func:`.local.resolve_devices`.
"""

from __future__ import annotations

from ..errors import ConfigError

__all__ = ["parse_gpus"]

_GPUS_FORMS = ("GPU indices like --gpus 0 or --gpus 0,1 (repeat one for more slots: 0,0), --gpus cpu "
               "(or cpu,cpu), or leave --gpus out for every visible GPU, else the CPU")


def parse_gpus(spec: str | None) -> str | None:
    """Check a ``--gpus`` value and return it without spaces.

    Accepted: None or ``auto`` (every visible GPU, else the CPU), ``cpu`` repeated once per slot
    (``cpu,cpu``), or GPU indices counted from 0 (``0,1``; an index may repeat: ``0,0``). Whether the
    indices exist is checked later, where the GPUs are counted.

    Raises:
        ConfigError: an empty value, list or item (``""``, ``,``, ``0,,1``), a negative or non-numeric index, or
            ``cpu`` mixed with indices; the fix lists the accepted forms.
    """
    if spec is None:
        return None
    parts = [p.strip() for p in spec.split(",")]
    if parts == ["auto"]:
        return "auto"
    if parts == [""]:
        raise ConfigError(f"bad --gpus value {spec!r}: empty", fix=f"use {_GPUS_FORMS}")
    if any(not p for p in parts):
        raise ConfigError(f"bad --gpus value {spec!r}: an empty item", fix=f"use {_GPUS_FORMS}")
    if all(p.lower() == "cpu" for p in parts):
        return ",".join(["cpu"] * len(parts))
    bad = next((p for p in parts if not (p.isascii() and p.isdigit())), None)  # no sign: -1 is refused
    if bad is not None:
        what = "cpu and GPU indices cannot be mixed" if bad.lower() == "cpu" else f"{bad!r} is not a GPU index"
        raise ConfigError(f"bad --gpus value {spec!r}: {what}", fix=f"use {_GPUS_FORMS}")
    return ",".join(str(int(p)) for p in parts)
