"""Baseline timings in KernelBench's JSON files: import into the store, export from it.

KernelBench's schema (PROTOCOLS.md section 2)::

    {"level1": {"1_Square_matrix_multiplication_.py":
                   {"mean": 2.66, "std": 0.0199, "min": 2.65, "max": 2.86, "num_trials": 100,
                    "hardware": "NVIDIA H100 80GB HBM3", "device": "cuda:0"}, ...}, ...}

with times in ms, one file per mode: ``baseline_time_torch.json`` (eager) and
``baseline_time_torch_compile_<backend>_<mode>.json`` (e.g. ``..._inductor_default.json``).

Imported timings are stored with ``measured_here=False`` and ``source="imported:<hardware>"``. They are
keyed by the hash of the problem code they are matched to (by level and file name): import them only
against the problem set they were timed on (KernelBench changed some problems after timing them, see
PROTOCOLS.md section 5). The evaluator never matches them to its own measurements, whose hardware and
software fingerprints differ.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .core import Problem, TimingStats
from .errors import ConfigError
from .protocols import COMPILE_MODES

__all__ = [
    "ImportSummary",
    "export_kernelbench_baselines",
    "filename_for_mode",
    "import_kernelbench_baselines",
    "mode_from_filename",
]

log = logging.getLogger(__name__)

_EAGER_FILE = "baseline_time_torch.json"
_COMPILE_RE = re.compile(
    r"^baseline_time_torch_compile_(?P<backend>[A-Za-z0-9]+)_(?P<mode>[A-Za-z0-9_-]+)\.json$"
)
_LEVEL_RE = re.compile(r"^level(\d+)$")


@dataclass(frozen=True, slots=True)
class ImportSummary:
    """What :func:`import_kernelbench_baselines` did.

    Attributes:
        stored: baselines written to the store.
        by_mode: mode -> count stored.
        unmatched: ``"level1/12_X.py"`` entries with no problem of that level and file name.
        files: the JSON files read.
    """

    stored: int
    by_mode: dict[str, int]
    unmatched: tuple[str, ...]
    files: tuple[str, ...]


def mode_from_filename(name: str) -> str | None:
    """The store's mode for a KernelBench baseline file name, or None for other files.

    ``baseline_time_torch.json`` -> ``"eager"``; ``baseline_time_torch_compile_inductor_<mode>.json`` ->
    ``"compile:<mode>"``; another backend ``B`` -> ``"compile:B:<mode>"``.
    """
    if name == _EAGER_FILE:
        return "eager"
    m = _COMPILE_RE.match(name)
    if not m:
        return None
    backend, mode = m.group("backend"), m.group("mode")
    return f"compile:{mode}" if backend == "inductor" else f"compile:{backend}:{mode}"


def filename_for_mode(mode: str) -> str:
    """The inverse of :func:`mode_from_filename`.

    Raises:
        ConfigError: a mode that is neither ``eager`` nor ``compile:...``.
    """
    if mode == "eager":
        return _EAGER_FILE
    parts = mode.split(":")
    if parts[0] != "compile" or len(parts) not in (2, 3):
        raise ConfigError(f"unknown baseline mode {mode!r}", fix="use eager or compile:<mode>")
    backend, m = ("inductor", parts[1]) if len(parts) == 2 else (parts[1], parts[2])
    return f"baseline_time_torch_compile_{backend}_{m}.json"


def _stats(entry: dict[str, Any]) -> TimingStats:
    mean = float(entry["mean"])
    std = float(entry.get("std") or 0.0)
    n = int(entry.get("num_trials") or 0)
    half = 1.96 * std / math.sqrt(n) if n > 0 else 0.0
    # KernelBench reports the mean only: the median is not known, so it is set to the mean and the
    # statistic is "mean"; the interval is the normal approximation of the mean's.
    return TimingStats(
        median_ms=mean,
        mean_ms=mean,
        std_ms=std,
        min_ms=float(entry.get("min", mean)),
        max_ms=float(entry.get("max", mean)),
        ci95_low_ms=mean - half,
        ci95_high_ms=mean + half,
        n=n,
        samples_ms=(),
        timer="cuda_events",
        statistic="mean",
    )


def import_kernelbench_baselines(
    store: Any,
    folder: str | Path,
    problems: Sequence[Problem],
    *,
    precision: str = "fp32",
    hardware_fingerprint: str | None = None,
    software_fingerprint: str | None = None,
    protocol_fingerprint: str = "imported:kernelbench",
) -> ImportSummary:
    """Import every KernelBench baseline JSON file in ``folder`` into ``store``.

    Args:
        store: a :class:`~kernelbench_harness.store.Store`.
        folder: a folder holding ``baseline_time_torch*.json`` files (e.g. KernelBench's
            ``results/timing/H100_Modal``).
        problems: the problems the timings belong to; entries are matched by level and file name
            (``{problem_id}_{name}.py``).
        precision: precision the timings were taken at (KernelBench: fp32).
        hardware_fingerprint: key to store them under (default ``"imported:<hardware>"`` from the file).
        software_fingerprint: default ``"imported:<folder name>"``.
        protocol_fingerprint: default ``"imported:kernelbench"``.

    Returns:
        What was stored and what could not be matched.

    Raises:
        ConfigError: ``folder`` is missing or holds no baseline file; a file is not KernelBench's schema.
    """
    root = Path(folder)
    files = sorted(f for f in root.glob("*.json") if mode_from_filename(f.name)) if root.is_dir() else []
    if not files:
        raise ConfigError(
            f"no KernelBench baseline files (baseline_time_torch*.json) in {root}",
            fix="pass the folder holding them, e.g. KernelBench's results/timing/<hardware>",
        )
    by_file = {(p.level, p.file_name): p for p in problems}
    stored = 0
    batch: list[dict[str, Any]] = []
    by_mode: dict[str, int] = {}
    unmatched: list[str] = []
    for f in files:
        mode = mode_from_filename(f.name)
        assert mode is not None
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ConfigError(f"{f}: not JSON ({e.msg})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{f}: expected {{'level1': {{'<file>.py': {{...}}}}}}")
        for level_key, entries in data.items():
            m = _LEVEL_RE.match(level_key)
            if not m or not isinstance(entries, dict):
                raise ConfigError(f"{f}: unexpected key {level_key!r} (expected level1, level2, ...)")
            level = int(m.group(1))
            for fname, entry in entries.items():
                prob = by_file.get((level, fname))
                if prob is None:
                    unmatched.append(f"{level_key}/{fname}")
                    continue
                try:
                    stats = _stats(entry)
                except (KeyError, TypeError, ValueError) as e:
                    raise ConfigError(f"{f}: {level_key}/{fname}: bad entry ({e})") from None
                hw_name = str(entry.get("hardware") or "unknown")
                hardware = {"gpu_name": hw_name, "device": entry.get("device", ""), "imported_from": str(f)}
                batch.append(
                    {
                        "problem": prob,
                        "hardware_fingerprint": hardware_fingerprint or f"imported:{hw_name}",
                        "software_fingerprint": software_fingerprint or f"imported:{root.name}",
                        "protocol_fingerprint": protocol_fingerprint,
                        "precision": precision,
                        "mode": mode,
                        "stats": stats,
                        "hardware": hardware,
                        "measured_here": False,
                        "source": f"imported:{hw_name}",
                    }
                )
                stored += 1
                by_mode[mode] = by_mode.get(mode, 0) + 1
    store.put_baselines(batch)  # one transaction
    if unmatched:
        log.warning(
            "%d baseline entries in %s matched no problem (e.g. %s)", len(unmatched), root, unmatched[0]
        )
    return ImportSummary(
        stored=stored, by_mode=by_mode, unmatched=tuple(unmatched), files=tuple(str(f) for f in files)
    )


def export_kernelbench_baselines(
    store: Any,
    out_dir: str | Path,
    *,
    hardware_fingerprint: str,
    software_fingerprint: str | None = None,
    protocol_fingerprint: str | None = None,
    precision: str = "fp32",
    modes: Sequence[str] | None = None,
    round_sig: int | None = 3,
) -> list[Path]:
    """Write stored baselines as KernelBench JSON files, one per mode.

    The newest baseline per problem and mode wins. ``"mean"`` holds the stored mean (KernelBench's
    statistic), ``"hardware"`` the GPU name, ``"device"`` the device.

    Args:
        store: a :class:`~kernelbench_harness.store.Store`.
        out_dir: folder to write into (created).
        hardware_fingerprint: which hardware's baselines.
        software_fingerprint, protocol_fingerprint: restrict further (None: any).
        precision: which precision.
        modes: which modes (default: every mode found; only ``eager`` and ``compile:<mode>`` with a
            known torch.compile mode or ``compile:<backend>:<mode>`` are written).
        round_sig: round times to this many significant figures like KernelBench (None: keep).

    Returns:
        The files written (none when nothing matches).
    """
    filters: dict[str, Any] = {"hardware_fingerprint": hardware_fingerprint, "precision": precision}
    if software_fingerprint is not None:
        filters["software_fingerprint"] = software_fingerprint
    if protocol_fingerprint is not None:
        filters["protocol_fingerprint"] = protocol_fingerprint
    records = store.baselines(**filters)
    per_mode: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for b in records:  # oldest first: later ones overwrite
        if modes is not None and b.mode not in modes:
            continue
        if b.mode != "eager" and not (
            b.mode.startswith("compile:")
            and (b.mode.split(":")[-1] in COMPILE_MODES or b.mode.count(":") == 2)
        ):
            continue
        st = b.stats
        entry = {
            "mean": _round(st.mean_ms, round_sig),
            "std": _round(st.std_ms, round_sig),
            "min": _round(st.min_ms, round_sig),
            "max": _round(st.max_ms, round_sig),
            "num_trials": st.n,
            "hardware": str(b.hardware.get("gpu_name") or b.hardware.get("gpu") or b.hardware_fingerprint),
            "device": str(b.hardware.get("device") or "cuda:0"),
        }
        per_mode.setdefault(b.mode, {}).setdefault(f"level{b.level}", {})[f"{b.problem_id}_{b.name}.py"] = (
            entry
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for mode, levels in sorted(per_mode.items()):
        data = {
            lv: dict(sorted(entries.items(), key=lambda kv: int(kv[0].split("_", 1)[0])))
            for lv, entries in sorted(levels.items(), key=lambda kv: int(kv[0][5:]))
        }
        path = out / filename_for_mode(mode)
        path.write_text(json.dumps(data, indent=4) + "\n", encoding="utf-8")
        written.append(path)
    return written


def _round(x: float, sig: int | None) -> float:
    if sig is None or x == 0 or not math.isfinite(x):
        return x
    return round(x, sig - 1 - math.floor(math.log10(abs(x))))
