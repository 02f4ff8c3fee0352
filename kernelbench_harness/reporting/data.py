"""JSON data behind the pages: one run's report data and the leaderboard's summary tables.

The pages are rendered from these plain dicts only (HELM's split: data first, then templates), and
the same dicts are written next to the pages as ``data/*.json`` with a ``schema_version``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import pandas as pd

from .. import __version__
from ..core import LAUNCH_BOUND_US, Problem
from ..metrics import (
    FAILURE_SPEEDUP,
    FAST_P_THRESHOLDS,
    GroupMetrics,
    fast_p_curve,
    problem_scores,
    sample_scores,
    summarize_run,
)

__all__ = [
    "LAUNCH_BOUND_MS",
    "LEGEND",
    "OUTCOME_ORDER",
    "REVIEW_SPEEDUP",
    "SCHEMA_VERSION",
    "build_leaderboard_data",
    "build_problem_data",
    "build_run_data",
    "error_notes",
    "hardware_label",
    "load_reported",
    "problem_page_name",
    "timed_on_cpu",
]

SCHEMA_VERSION = 1
REVIEW_SPEEDUP = 10.0
"""Speedups above this are marked for review (KernelBench's warning threshold)."""
LAUNCH_BOUND_MS = LAUNCH_BOUND_US / 1000.0  # core.LAUNCH_BOUND_US, in ms
"""Problems whose eager time is below this (ms) are marked launch-bound: their times measure launch
overhead more than the kernel (PROTOCOLS.md section 6)."""

OUTCOME_ORDER = (
    "correct",
    "policy",
    "timing_invalid",
    "incorrect",
    "cheat",
    "compile_error",
    "runtime_error",
    "timeout",
    "oom",
    "no_code",
    "generation_error",
)

LEGEND: dict[str, str] = {
    "correct_rate": "Share of problems whose candidate's outputs matched the reference (outcomes correct, "
    "policy, timing_invalid); with several samples, the mean over a problem's samples.",
    "faster_rate": "Share of problems in scope solved correctly with a speedup > 1 (fast_1; a tie at 1.0x is not "
    "faster). Failed and missing problems count as not faster.",
    "fast_p": "fast_p = share of all problems in scope that are correct with speedup > p (strict), as KernelBench "
    "defines it; failed and missing problems count 0.",
    "geomean_correct": "Geometric-mean speedup over correct candidates only (KernelBench, CUDA Agent): it ignores "
    "failures, so read it with the correctness rate.",
    "geomean_all": f"Geometric-mean speedup over all problems in scope, each failed or missing problem counted as "
    f"{FAILURE_SPEEDUP:g}x (you keep the baseline); correct but slower candidates keep their speedup "
    f"below 1.",
    "speedup": "speedup = baseline_ms / candidate_ms, only for correct candidates (cheat and timing_invalid "
    "verdicts give none). Baselines: eager PyTorch and torch.compile (the protocol's mode), timed by the "
    "same code on the same GPU.",
    "weighted": "weighted = CUDA Agent's overall: per-level rates averaged and per-level geomeans combined "
    "geometrically, weighted by each level's problem count (100/100/50 on KernelBench).",
    "ci": "Brackets give 95% percentile-bootstrap intervals over problems (2000 resamples, fixed seed; "
    "stratified by level for the weighted overall).",
    "sample": "A sample's score is its best correct turn (lowest candidate time among turns with a speedup).",
    "review": f"Speedups above {REVIEW_SPEEDUP:g}x are marked for review.",
    "launch_bound": f"Problems whose eager time is under {LAUNCH_BOUND_MS * 1000:g} µs are marked launch-bound: "
    f"their times mostly measure launch overhead.",
    "host_bound": "host-bound: in this problem a time (the candidate's, eager's or torch.compile's) was set by the "
    "host issuing the launches, not by the GPU (in most trials: with launch hiding, the host took longer than "
    "the GPU; without it, the host's issue time was at least 90% of the event time): such times differ between "
    "processes far more than GPU-bound ones, so read the speedup as approximate.",
    "degenerate": "Problems flagged degenerate by the problem audit (e.g. output constant or below the tolerance), "
    "and problems whose reference failed before any candidate code ran (reference-failed: a bad problem file or "
    "an op the device lacks), are left out of every score and listed apart.",
}

#: problem flags whose problems are left out of every score (for every model alike) and listed apart
SCORED_APART = ("degenerate", "reference-failed")


def run_problem_flags(store: Any, run_name: str, frame: pd.DataFrame,
                      flags: Mapping[str, Sequence[str]] | None = None) -> dict[str, list[str]]:
    """Problem key (``"L2/83"``) -> flags of a run: those stored for its problems (the audit's), those its results
    carry (``problem_flags`` of :meth:`..store.Store.results_frame`: host-bound, reference-failed, ...) and
    ``flags`` given by the caller, merged."""
    out: dict[str, list[str]] = {k: list(v) for k, v in store.problem_flags(run_name).items()}
    if len(frame):
        for lv, pid, fl in zip(frame["level"], frame["problem_id"], frame["problem_flags"]):
            if fl:
                key = f"L{int(lv)}/{int(pid)}"
                out[key] = sorted(set(out.get(key, [])) | set(fl))
    for k, v in (flags or {}).items():
        out[k] = sorted(set(out.get(k, [])) | set(v))
    return out


def scored_apart(all_flags: Mapping[str, Sequence[str]]) -> list[str]:
    """The problem keys flagged :data:`SCORED_APART`, in level and id order."""
    return sorted((k for k, v in all_flags.items() if any(f in v for f in SCORED_APART)),
                  key=lambda k: tuple(int(x) for x in k[1:].split("/")))



def _effective_fingerprint(info: Any) -> str:
    """The run's protocol fingerprint as this version computes it from the stored settings: a run stored
    before a setting existed (with that setting's neutral default) matches a newer run with the same
    rules, e.g. ``alternate_rounds`` (absent before session 4, 1 = off). Falls back to the stored one."""
    try:
        from ..protocols import Protocol

        return Protocol.from_dict(dict(info.protocol or {})).fingerprint()
    except Exception:  # noqa: BLE001 - an unreadable stored protocol keeps its stored fingerprint
        return info.protocol_fingerprint

def protocol_changes(name: str, precision: str, stored: Mapping[str, Any] | None) -> list[str]:
    """The settings in which a run's stored protocol differs from protocol ``name`` at ``precision`` as
    this version defines it, as ``key=value`` strings (``-P`` overrides, or a run stored under older
    rules); empty when they agree or the stored protocol cannot be read."""
    import dataclasses

    try:
        from ..protocols import Protocol, get_protocol

        have = Protocol.from_dict(dict(stored or {}))
        base = get_protocol(name, precision)
    except Exception:  # noqa: BLE001 - an unknown protocol or an unreadable store: nothing to compare
        return []
    out = []
    for f in dataclasses.fields(Protocol):
        if f.name in ("name", "precision"):
            continue
        a, b = getattr(have, f.name), getattr(base, f.name)
        if a != b:
            shown = {k: [v.atol, v.rtol] for k, v in a.items()} if f.name == "tolerances" else a
            out.append(f"{f.name}={json.dumps(shown) if not isinstance(shown, str) else shown}")
    return out


def protocol_label(name: str, changes: Sequence[str]) -> str:
    """``name``, or ``name (key=value, ...)`` when the run's settings differ from the named protocol's."""
    return f"{name} ({', '.join(changes)})" if changes else name


def _now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def _clean(v: Any) -> Any:
    """JSON-safe copy: NaN/inf -> None, numpy scalars -> Python, tuples -> lists."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            return _clean(v.item())
        except (TypeError, ValueError):
            return str(v)
    if isinstance(v, datetime):
        return v.isoformat()
    if v is pd.NA or v is pd.NaT:
        return None
    return v


def hardware_label(hardware: Mapping[str, Any]) -> str:
    """A short human name for a hardware fingerprint dict: ``"NVIDIA H200"``, ``"2x NVIDIA H200"``, ``"cpu"``."""
    name = None
    if hardware.get("device_type") == "cpu":
        model = hardware.get("cpu_model") or hardware.get("device_name")
        return f"cpu ({model})" if model else "cpu"
    for key in ("gpu_name", "gpu", "device_name", "name"):
        v = hardware.get(key)
        if isinstance(v, str) and v:
            name = v
            break
    if name is None:
        gpus = hardware.get("gpus")
        if isinstance(gpus, list) and gpus:
            first = gpus[0]
            name = first.get("name") if isinstance(first, dict) else str(first)
    if name is None:
        name = "cpu" if str(hardware.get("device", "")).startswith("cpu") or not hardware else "unknown"
    count = hardware.get("gpu_count") or hardware.get("count")
    if isinstance(count, int) and count > 1:
        name = f"{count}x {name}"
    return name


def timed_on_cpu(hardware: Mapping[str, Any]) -> bool:
    """Whether a run's stored hardware record says it was evaluated on a CPU, not a GPU.

    The record is the executor's fingerprint (:func:`kernelbench_harness.hardware.fingerprint`):
    ``device_type`` is ``"cpu"`` when no GPU was used. Records without that key fall back to
    ``device`` (``"cpu"``, ``"cuda:0"``). An empty or unreadable record is not called a CPU run.
    """
    device_type = hardware.get("device_type")
    if device_type is not None:
        return str(device_type) == "cpu"
    return str(hardware.get("device") or "").startswith("cpu")


def error_notes(protocol: Mapping[str, Any]) -> dict[str, str]:
    """What each correctness figure on a problem page means under the run's protocol.

    The statements follow :func:`kernelbench_harness.execution.verify.compare_outputs` (the figures)
    and ``EvalResult`` (each is the largest over the turn's correctness trials); the numbers (``k``,
    ``floor_rel``, ``atol``, ``rtol``) are the run's stored protocol settings.

    Args:
        protocol: the run's stored ``Protocol.to_dict()``.

    Returns:
        Figure name -> one-paragraph explanation, in display order.
    """
    from ..protocols import Protocol

    try:
        p = Protocol.from_dict(dict(protocol or {}))
    except Exception:  # noqa: BLE001 - an unreadable stored protocol: the defaults' wording
        p = Protocol()
    tol = p.tolerances.get(p.precision) or p.tolerance
    fp64 = p.judge == "fp64-bound"
    ref = ("the PyTorch reference evaluated in float64 (its inputs and weights upcast; ref64 below)" if fp64
           else f"the PyTorch reference run at the run's precision ({p.precision})")
    if p.nan_policy == "match":
        nonfinite = "NaN and ±Inf are left out of both figures: they must sit exactly where the reference has them."
    else:
        nonfinite = "Any NaN in the candidate's output fails the turn; ±Inf is left out of both figures."
    notes = {
        "max abs error": f"Largest |candidate − reference| over every element of every output and every "
        f"correctness trial that ran (up to {p.correct_trials} input sets; they stop at the first failing one), "
        f"against {ref}. Absolute, in the output's own units (no scaling). {nonfinite}",
        "max rel error": "Largest elementwise |candidate − reference| / max(|reference|, 1e-6 × max|reference|) "
        "over the same elements and the same reference: a unitless ratio (1e-3 = 0.1%). The floor keeps "
        "elements near zero from dominating. Shown for information: no verdict uses it.",
    }
    if fp64:
        notes["correctness bound"] = (
            f"The verdict (judge fp64-bound): correct when every element satisfies |candidate − ref64| ≤ "
            f"k × e_ref + floor_rel × max|ref64|, with k = {p.fp64_multiple:g}, floor_rel = {p.fp64_floor_rel:g} "
            f"and e_ref = max|ref − ref64|, the PyTorch reference's own error at {p.precision} on the same inputs. "
            "The bound is computed per output and per trial; the problem page shows the largest bound and the "
            "largest e_ref over the trials, in output units. Integer and boolean outputs must match exactly. "
            "Problems flagged no-fp64-reference or nondeterministic-reference have no float64 twin and are "
            f"judged by allclose against the {p.precision} reference instead (no bound shown)."
        )
        notes["KernelBench allclose"] = (
            f"KernelBench's own check, recorded beside the verdict for comparison and not deciding it: "
            f"torch.allclose(candidate, reference at {p.precision}, atol={tol.atol:g}, rtol={tol.rtol:g}), i.e. "
            f"|candidate − ref| ≤ atol + rtol × |ref| elementwise, on every trial. A candidate can pass it and "
            "fail the bound (e.g. lower-precision arithmetic), or the reverse."
        )
    else:
        nan = " Any NaN in the output fails." if p.nan_policy == "fail" else ""
        notes["KernelBench allclose"] = (
            f"The verdict (judge allclose, as KernelBench): correct when torch.allclose(candidate, reference at "
            f"{p.precision}, atol={tol.atol:g}, rtol={tol.rtol:g}) holds on every trial, i.e. "
            f"|candidate − ref| ≤ atol + rtol × |ref| elementwise.{nan} Integer and boolean outputs must "
            "match exactly."
        )
    return notes


def problem_page_name(level: int, problem_id: int) -> str:
    """File name of a problem's page inside a run report: ``problems/L1_23.html``."""
    return f"problems/L{level}_{problem_id}.html"


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _int(v: Any) -> int | None:
    f = _num(v)
    return None if f is None else int(f)


def _verdict_label(outcome: str, tag: str) -> str:
    return f"{outcome}({tag})" if tag and outcome in ("cheat", "timing_invalid", "policy") else outcome


def build_run_data(
    store: Any, run_name: str, *, flags: Mapping[str, Sequence[str]] | None = None, n_resamples: int = 2000
) -> dict[str, Any]:
    """Everything the run report shows, as plain JSON.

    Args:
        store: a :class:`~kernelbench_harness.store.Store`.
        run_name: the run.
        flags: problem key (``"L2/83"``) -> problem flags (``["degenerate"]``); merged with the flags
            stored for the run. Degenerate problems are left out of the scores and listed apart.
        n_resamples: bootstrap resamples for the intervals.

    Returns:
        A dict with ``schema_version``, ``run``, ``legend``, ``models``, ``metrics`` (per model and
        group, :meth:`GroupMetrics.to_dict`), ``curves``, ``distributions``, ``verdicts``,
        ``degenerate``, ``usage`` (tokens and cost), ``problems`` (per problem and model) and
        ``settings``.

    Raises:
        StoreError: no such run.
    """
    from ..errors import StoreError

    info = store.get_run(run_name)
    if info is None:
        raise StoreError(f"no run named {run_name!r} in this store", fix="see `kbench runs list`")
    problems: list[Problem] = store.run_problems(run_name)
    frame = store.results_frame(run_name)
    all_flags = run_problem_flags(store, run_name, frame, flags)
    degenerate = scored_apart(all_flags)
    deg_set = set(degenerate)
    scores = sample_scores(frame)
    models = (
        sorted(frame["model"].unique().tolist()) if len(frame) else ([info.model] if info.model else [""])
    )
    metrics: list[GroupMetrics] = summarize_run(
        frame, problems, models=models, exclude=deg_set, n_resamples=n_resamples
    )
    scope = [p for p in problems if p.key not in deg_set]

    curves = {
        m: {
            b: [[x, y] for x, y in fast_p_curve(scores, scope, b, model=m, exclude=deg_set)]
            for b in ("eager", "compile")
        }
        for m in models
    }
    distributions: dict[str, dict[str, list[float]]] = {}
    for m in models:
        sm = scores[(scores["model"] == m) & scores["has_speedup"]] if len(scores) else scores
        if len(sm):
            keys = "L" + sm["level"].astype(str) + "/" + sm["problem_id"].astype(str)
            sm = sm[~keys.isin(deg_set)]
        distributions[m] = (
            {
                b: [v for v in (_num(x) for x in sm[f"speedup_{b}"]) if v is not None]
                for b in ("eager", "compile")
            }
            if len(sm)
            else {"eager": [], "compile": []}
        )

    verdicts = _verdicts(scores, models, problems, deg_set)
    usage = _usage(frame, models)
    rows = _problem_rows(scores, problems, models, all_flags)

    return _clean(
        {
            "schema_version": SCHEMA_VERSION,
            "kind": "kbench.run",
            "generated_at": _now_iso(),
            "kbench_version": __version__,
            "run": {
                "run_name": info.run_name,
                "model": info.model,
                "status": info.status,
                # why it reads so (a running run's runner, an interrupted one's gone runner), and how to continue it
                "status_note": info.status_note,
                "resume_command": _resume_command(info) if info.status == "interrupted" else "",
                "created_at": info.created_at,
                "finished_at": info.finished_at,
                "protocol_name": info.protocol_name,
                "protocol_changes": (changes := protocol_changes(info.protocol_name, info.precision, info.protocol)),
                "protocol_label": protocol_label(info.protocol_name, changes),
                "precision": info.precision,
                "protocol_fingerprint": _effective_fingerprint(info),
                "stored_protocol_fingerprint": info.protocol_fingerprint,
                "hardware_fingerprint": info.hardware_fingerprint,
                "hardware_label": hardware_label(info.hardware),
                "timed_on_cpu": timed_on_cpu(info.hardware or {}),
                "kbench_version": info.kbench_version,
                "problem_count": info.problem_count,
                "problem_set": _problem_set_id(problems),
                "problem_set_label": _problem_set_label(problems),
                "attempt_count": len(frame),
                "sample_count": len(scores),
            },
            "settings": {
                "protocol": info.protocol,
                "config": info.config,
                "hardware": info.hardware,
                "problem_sources": sorted({_source_root(p.source) for p in problems}),
            },
            "legend": LEGEND,
            "error_notes": error_notes(info.protocol),
            "fast_p_thresholds": list(FAST_P_THRESHOLDS),
            "models": models,
            "levels": sorted({p.level for p in problems}),
            "metrics": [g.to_dict() for g in metrics],
            "curves": curves,
            "distributions": distributions,
            "verdicts": verdicts,
            "degenerate": degenerate,
            "flags": all_flags,
            "usage": usage,
            "problems": rows,
        }
    )


def _resume_command(info: Any) -> str:
    """The command that continues ``info``'s run, with the ``--db`` it was started with (none: the default); as
    :func:`kernelbench_harness.runner.resume_command` writes it (not imported: the runner imports torch)."""
    import shlex

    db = ((info.config or {}).get("run_config") or {}).get("db")
    return f"kbench run --run-name {shlex.quote(info.run_name)} --resume" + (
        f" --db {shlex.quote(db)}" if isinstance(db, str) and db else "")


def _problem_set_id(problems: list[Problem]) -> str:
    """Short hash of the run's problem set (the sources' SHA-256s, sorted): runs over the same problems
    share it, wherever the files were loaded from."""
    import hashlib

    blob = "\n".join(sorted(p.code_sha256 for p in problems)).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _problem_set_label(problems: list[Problem]) -> str:
    roots = {_source_root(p.source) for p in problems}
    levels = sorted({p.level for p in problems})
    where = "bundled suite" if roots == {"bundled"} else "problems"
    return f"{len(problems)} {where}, level{'s' if len(levels) > 1 else ''} {', '.join(map(str, levels))}"


def _source_root(source: str) -> str:
    s = source or ""
    if s.startswith("bundled:"):
        return "bundled"
    for marker in ("/level1/", "/level2/", "/level3/", "/level4/"):
        if marker in s:
            return s.split(marker)[0]
    return s


def _verdicts(
    scores: pd.DataFrame, models: Sequence[str], problems: Sequence[Problem], deg: set[str]
) -> dict[str, Any]:
    """Verdict counts of best turns per model and level, with cheat / timing_invalid tags."""
    levels = sorted({p.level for p in problems})
    out_rows = []
    for m in models:
        for lv in levels:
            for apart in (False, True):
                keys = {
                    (p.level, p.problem_id) for p in problems if p.level == lv and (p.key in deg) == apart
                }
                if apart and not keys:
                    continue
                sm = scores[(scores["model"] == m) & (scores["level"] == lv)] if len(scores) else scores
                counts: Counter[str] = Counter()
                tags: Counter[str] = Counter()
                seen: set[tuple[int, int]] = set()
                for r in sm.itertuples():
                    k = (int(r.level), int(r.problem_id))
                    if k not in keys:
                        continue
                    seen.add(k)
                    counts[str(r.outcome)] += 1
                    if r.tag:
                        tags[_verdict_label(str(r.outcome), str(r.tag))] += 1
                missing = len(keys - seen)
                if missing:
                    counts["missing"] += missing
                out_rows.append(
                    {
                        "model": m,
                        "level": lv,
                        "degenerate": apart,
                        "counts": dict(counts),
                        "tags": dict(tags),
                        "problems": len(keys),
                    }
                )
    return {"order": list(OUTCOME_ORDER) + ["missing"], "rows": out_rows}


def _usage(frame: pd.DataFrame, models: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for m in models:
        f = frame[frame["model"] == m] if len(frame) else frame

        def total(col: str, f: pd.DataFrame = f) -> float | None:
            if not len(f):
                return None
            s = pd.to_numeric(f[col], errors="coerce")
            return float(s.sum()) if s.notna().any() else None

        lat = pd.to_numeric(f["latency_s"], errors="coerce") if len(f) else pd.Series(dtype=float)
        out.append(
            {
                "model": m,
                "attempts": len(f),
                "samples": int(f.groupby(["level", "problem_id", "sample_id"]).ngroups) if len(f) else 0,
                "input_tokens": total("input_tokens"),
                "output_tokens": total("output_tokens"),
                "cached_tokens": total("cached_tokens"),
                "reasoning_tokens": total("reasoning_tokens"),
                "cost_usd": total("cost_usd"),
                "latency_s_total": total("latency_s"),
                "latency_s_median": float(lat.median()) if lat.notna().any() else None,
                "generation_errors": int(f["generation_error"].notna().sum()) if len(f) else 0,
            }
        )
    return out


def _problem_rows(
    scores: pd.DataFrame, problems: Sequence[Problem], models: Sequence[str], flags: Mapping[str, list[str]]
) -> list[dict[str, Any]]:
    rows = []
    per_model = {m: problem_scores(scores, problems, m) for m in models}
    for i, p in enumerate(problems):
        entries = []
        for m in models:
            r = per_model[m].iloc[i].to_dict()
            if r.get("samples", 0) == 0:
                continue
            entries.append(_problem_entry(r, m))
        pf = list(flags.get(p.key, []))
        eager = next((e["eager_ms"] for e in entries if e["eager_ms"] is not None), None)
        if eager is not None and eager < LAUNCH_BOUND_MS and "launch-bound" not in pf:
            pf.append("launch-bound")
        base = {
            "key": p.key,
            "level": p.level,
            "problem_id": p.problem_id,
            "name": p.name,
            "sha256": p.code_sha256,
            "page": problem_page_name(p.level, p.problem_id),
            "flags": pf,
        }
        if not entries:
            rows.append(
                {
                    **base,
                    "model": None,
                    "outcome": "missing",
                    "verdict": "missing",
                    "samples": 0,
                    "passed_samples": 0,
                    "candidate_ms": None,
                    "eager_ms": None,
                    "compile_ms": None,
                    "speedup_eager": None,
                    "speedup_compile": None,
                    "review": False,
                    "sample_id": None,
                    "best_turn": None,
                    "result_id": None,
                }
            )
        for e in entries:
            rows.append({**base, **e})
    return rows


def _problem_entry(r: Mapping[str, Any], model: str) -> dict[str, Any]:
    se, sc = _num(r.get("speedup_eager")), _num(r.get("speedup_compile"))
    return {
        "model": model,
        "outcome": r.get("outcome"),
        "verdict": _verdict_label(str(r.get("outcome")), str(r.get("tag") or "")),
        "samples": _int(r.get("samples")) or 0,
        "passed_samples": _int(r.get("passed_samples")) or 0,
        "candidate_ms": _num(r.get("candidate_ms")),
        "eager_ms": _num(r.get("eager_ms")),
        "compile_ms": _num(r.get("compile_ms")),
        "speedup_eager": se,
        "speedup_compile": sc,
        "review": any(v is not None and v > REVIEW_SPEEDUP for v in (se, sc)),
        "sample_id": _int(r.get("sample_id")),
        "best_turn": _int(r.get("best_turn")),
        "result_id": _int(r.get("result_id")),
    }


def build_problem_data(
    store: Any, run_name: str, problems: Sequence[Problem] | None = None
) -> dict[str, dict[str, Any]]:
    """Every problem page's data: each sample and turn with code, verdict, evidence, times and transcript.

    Args:
        store: the store.
        run_name: the run.
        problems: the problems to build (default: the run's scope).

    Returns:
        Problem key -> page data (``schema_version``, ``key``, ``name``, ``code``, ``samples`` with
        their ``turns``).
    """
    if problems is None:
        problems = store.run_problems(run_name)
    frame = store.results_frame(run_name)
    scores = sample_scores(frame)
    best_ids = set(scores["result_id"].tolist()) if len(scores) else set()
    by_sample: dict[tuple[int, int], dict[tuple[str, int], list[Any]]] = {}
    for a in store.attempts(run_name):
        by_sample.setdefault((a.level, a.problem_id), {}).setdefault((a.model, a.sample_id), []).append(a)
    out = {}
    for problem in problems:
        samples = []
        for (model, sid), attempts in sorted(by_sample.get((problem.level, problem.problem_id), {}).items()):
            samples.append(
                {
                    "model": model,
                    "sample_id": sid,
                    "anchor": f"s-{_slug(model)}-{sid}",
                    "turns": [_turn(a, best_ids) for a in sorted(attempts, key=lambda a: a.turn)],
                }
            )
        out[problem.key] = _clean(
            {
                "schema_version": SCHEMA_VERSION,
                "kind": "kbench.problem",
                "run_name": run_name,
                "key": problem.key,
                "level": problem.level,
                "problem_id": problem.problem_id,
                "name": problem.name,
                "sha256": problem.code_sha256,
                "source": problem.source,
                "code": problem.code,
                "samples": samples,
            }
        )
    return out


def _turn(a: Any, best_ids: set[int]) -> dict[str, Any]:
    res = a.result
    se, sc = res.speedup_eager, res.speedup_compile
    cand = res.candidate
    trials = [t for t in (res.extra or {}).get("trials") or [] if isinstance(t, Mapping)]
    return {
        "turn": a.turn,
        "result_id": a.result_id,
        "best": a.result_id in best_ids,
        "outcome": str(res.outcome),
        "tag": res.tag,
        "verdict": _verdict_label(str(res.outcome), res.tag),
        "compiled": res.compiled,
        "correct": res.correct,
        "max_abs_err": res.max_abs_err,
        "max_rel_err": res.max_rel_err,
        "allclose_kernelbench": res.allclose_kernelbench,
        "bound": _largest(t.get("bound") for t in trials),
        "ref_err": _largest(t.get("ref_err") for t in trials),
        "candidate_ms": res.candidate_ms,
        "eager_ms": res.eager_ms,
        "compile_ms": res.compile_ms,
        "speedup_eager": se,
        "speedup_compile": sc,
        "review": any(v is not None and v > REVIEW_SPEEDUP for v in (se, sc)),
        "timing": None
        if cand is None
        else {
            "median_ms": cand.median_ms,
            "mean_ms": cand.mean_ms,
            "std_ms": cand.std_ms,
            "min_ms": cand.min_ms,
            "max_ms": cand.max_ms,
            "ci95_low_ms": cand.ci95_low_ms,
            "ci95_high_ms": cand.ci95_high_ms,
            "n": cand.n,
            "timer": cand.timer,
            "statistic": cand.statistic,
        },
        "findings": [fd.to_dict() for fd in res.findings],
        # the integrity checks that ended without a judgement (skipped, or the trusted side could not judge)
        "checks_not_judged": _checks_not_judged((res.extra or {}).get("integrity_checks")),
        "error": res.error,
        "log": res.log,
        "device": res.device,
        "phase_s": dict(res.phase_s),
        "backend": a.backend,
        "code": a.code or "",
        "messages": list(a.messages or []),
        "reply": a.reply or "",
        "generation": {k: v for k, v in a.generation.items() if k not in ("text", "code")},
    }


def _checks_not_judged(checks: Any) -> dict[str, str]:
    """The integrity checks of a result's ``extra["integrity_checks"]`` that ended without a judgement (check ->
    why); nothing for a result stored before they were recorded."""
    if not isinstance(checks, dict):
        return {}
    return {str(k): str(v) for k, v in checks.items() if v != "judged"}


def _largest(values: Any) -> float | None:
    """The largest finite number among ``values`` (None when there is none)."""
    nums = [v for v in (_num(x) for x in values) if v is not None]
    return max(nums) if nums else None


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in s).strip("-") or "model"


def load_reported() -> dict[str, Any]:
    """Figures reported by papers (not measured here), from the packaged ``reported_results.json``."""
    text = (
        resources.files("kernelbench_harness.reporting")
        .joinpath("static/reported_results.json")
        .read_text(encoding="utf-8")
    )
    return json.loads(text)


_HEADLINE = (
    "correct_rate",
    "faster_eager_rate",
    "faster_compile_rate",
    "geomean_speedup_eager",
    "geomean_speedup_compile",
    "geomean_speedup_eager_all",
    "geomean_speedup_compile_all",
)


def build_leaderboard_data(
    runs: Sequence[tuple[Any, str, str]],
    *,
    n_resamples: int = 2000,
    run_data: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The leaderboard's rows: one per (run, model, group), grouped by (protocol, precision, hardware).

    Args:
        runs: ``(store, run_name, site_path)`` per run, ``site_path`` being where that run's report
            sits relative to the site root (``runs/<name>/index.html``).
        n_resamples: bootstrap resamples when a run's data must be built.
        run_data: already built :func:`build_run_data` dicts by ``site_path``, to avoid recomputing.

    Returns:
        ``{"schema_version", "kind", "generated_at", "legend", "groups", "rows", "reported"}``; each row
        holds run_name, model, group (``L1``.., ``all``, ``weighted``), protocol, protocol_fingerprint,
        precision, hardware, hardware_fingerprint, status, problems, attempted, the headline metrics
        as ``{value, low, high}`` and fast_p dicts, and ``report`` (the link).
    """
    rows = []
    groups: dict[tuple[str, str, str, str, str], dict[str, Any]] = {}
    for store, name, path in runs:
        data = (run_data or {}).get(path) or build_run_data(store, name, n_resamples=n_resamples)
        run = data["run"]
        # the same protocol name with other settings (overrides) is another group: never mixed
        # and another problem set is another group: fast_p over the bundled suite and over KernelBench are
        # not comparable
        gkey = (f"{run['protocol_name']}", run["precision"], run["hardware_label"], run["protocol_fingerprint"],
                str(run.get("problem_set", "")))
        g = groups.setdefault(
            gkey,
            {
                "id": f"g{len(groups) + 1}",
                "protocol": run.get("protocol_label") or run["protocol_name"],
                "precision": run["precision"],
                "hardware": run["hardware_label"],
                "protocol_fingerprints": [],
                "problem_set": run.get("problem_set", ""),
                "problem_set_label": run.get("problem_set_label", ""),
                "runs": [],
            },
        )
        g["timed_on_cpu"] = bool(g.get("timed_on_cpu") or run.get("timed_on_cpu"))
        if run["protocol_fingerprint"] not in g["protocol_fingerprints"]:
            g["protocol_fingerprints"].append(run["protocol_fingerprint"])
        g["runs"].append(name)
        for m in data["metrics"]:
            if m["samples"] == 0 and m["group"] != "all":
                continue
            row = {
                "run_name": name,
                "model": m["model"] or run["model"],
                "group": m["group"],
                "level": m["level"],
                "protocol": run.get("protocol_label") or run["protocol_name"],
                "protocol_fingerprint": run["protocol_fingerprint"],
                "precision": run["precision"],
                "hardware": run["hardware_label"],
                "hardware_fingerprint": run["hardware_fingerprint"],
                "timed_on_cpu": bool(run.get("timed_on_cpu")),
                "group_id": g["id"],
                "status": run["status"],
                "finished_at": run["finished_at"],
                "problems": m["problems"],
                "attempted": m["attempted"],
                "samples": m["samples"],
                "report": path,
                "fast_p_eager": m["fast_p_eager"],
                "fast_p_compile": m["fast_p_compile"],
                "pass_at_k": m["pass_at_k"],
            }
            for k in _HEADLINE:
                row[k] = m[k]
            rows.append(row)
    reported = load_reported()
    return _clean(
        {
            "schema_version": SCHEMA_VERSION,
            "kind": "kbench.leaderboard",
            "generated_at": _now_iso(),
            "kbench_version": __version__,
            "legend": LEGEND,
            "groups": list(groups.values()),
            "rows": rows,
            "reported": reported,
        }
    )
