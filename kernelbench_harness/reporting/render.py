"""Write the per-run report, the static leaderboard site and the run exports.

Every page is one self-contained HTML file (CSS, JavaScript and SVG charts inline, no CDN) that
works opened from disk (``file://``) and served over HTTP; links between pages are relative.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from .. import __version__
from ..metrics import FAILURE_SPEEDUP, PASSED_OUTCOMES, sample_scores
from . import charts
from .data import (
    SCHEMA_VERSION,
    build_leaderboard_data,
    build_problem_data,
    build_run_data,
)
from .highlight import highlight_css, highlight_source

__all__ = [
    "default_report_dir",
    "export_run",
    "render_run_report",
    "site_run_dir",
    "write_leaderboard",
    "write_run_report",
]

log = logging.getLogger(__name__)

_GROUP_LABELS = {"all": "all levels (pooled)", "weighted": "overall (level-weighted)"}


def default_report_dir(run_name: str) -> Path:
    """``reports/<run_name>`` relative to the current directory."""
    return Path("reports") / _safe_name(run_name)


def _safe_name(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return s or "run"


def site_run_dir(run_name: str) -> str:
    """Where a run's report sits inside the leaderboard site: ``runs/<safe name>``."""
    return f"runs/{_safe_name(run_name)}"


# --- jinja -------------------------------------------------------------------------------------


def _static(name: str) -> str:
    return (
        resources.files("kernelbench_harness.reporting")
        .joinpath(f"static/{name}")
        .read_text(encoding="utf-8")
    )


def _dash() -> str:
    return "\u2014"


def _pct(v: Any) -> str:
    return _dash() if v is None else f"{float(v) * 100:.1f}%"


def _x(v: Any) -> str:
    if v is None:
        return _dash()
    v = float(v)
    if v >= 100:
        return f"{v:.0f}x"
    return f"{v:.2f}x" if v >= 0.1 else f"{v:.2g}x"


def _ms(v: Any) -> str:
    if v is None:
        return _dash()
    v = float(v)
    if not math.isfinite(v):
        return str(v)
    return f"{v:.3g}" if v < 1000 else f"{v:,.0f}"


def _dv(v: Any) -> str:
    if v is None:
        return ""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return repr(f) if math.isfinite(f) else ""


def _est(e: Mapping[str, Any] | None, kind: str = "pct") -> Markup:
    """A table cell for an estimate ``{value, low, high}``: the value and its interval below it."""
    fmt = _pct if kind == "pct" else _x
    if not e or e.get("value") is None:
        return Markup('<td class="num" data-v="">\u2014</td>')
    lo, hi = e.get("low"), e.get("high")
    ci = (
        ""
        if lo is None or hi is None
        else Markup('<span class="ci">[{}\u2013{}]</span>').format(fmt(lo), fmt(hi))
    )
    return Markup('<td class="num" data-v="{}">{}{}</td>').format(_dv(e["value"]), fmt(e["value"]), ci)


def _group_label(g: str) -> str:
    if g in _GROUP_LABELS:
        return _GROUP_LABELS[g]
    m = re.fullmatch(r"L(\d+)", str(g))
    return f"level {m.group(1)}" if m else str(g)


def _pnum(p: Any) -> str:
    return f"{float(p):g}"


def _when(v: Any) -> str:
    if not v:
        return _dash()
    try:
        return datetime.fromisoformat(str(v)).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return str(v)


def _plain(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    return _dash() if v is None else str(v)


def _count(v: Any) -> str:
    return _dash() if v is None else f"{int(v):,}"


def _usd(v: Any) -> str:
    return _dash() if v is None else f"{float(v):.2f}"


def _secs(v: Any) -> str:
    return _dash() if v is None else f"{float(v):.1f}"


def _sci(v: Any) -> str:
    if v is None:
        return _dash()
    return f"{float(v):.3g}"


def _yesno(v: Any) -> str:
    return "yes" if v else "no"


def _anchor(model: Any, sample_id: Any) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in str(model)).strip("-") or "model"
    return f"s-{slug}-{sample_id}"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("kernelbench_harness.reporting", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        pct=_pct,
        x=_x,
        ms=_ms,
        dv=_dv,
        est=_est,
        group_label=_group_label,
        pnum=_pnum,
        when=_when,
        plain=_plain,
        count=_count,
        usd=_usd,
        secs=_secs,
        sci=_sci,
        yesno=_yesno,
        anchor=_anchor,
        highlight=lambda code: Markup(highlight_source(code)),
    )
    env.globals.update(
        version=__version__,
        css=Markup(_static("style.css")),
        js=Markup(_static("site.js")),
        failure_speedup=f"{FAILURE_SPEEDUP:g}",
        schema_version=SCHEMA_VERSION,
    )
    return env


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _write_json(path: Path, data: Any) -> None:
    _write(path, json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n")


# --- per-run report ------------------------------------------------------------------------------


def _run_charts(data: Mapping[str, Any]) -> dict[str, Any]:
    models = data["models"]
    marks = data["fast_p_thresholds"]
    out: dict[str, Any] = {}
    for b, label in (("eager", "eager"), ("compile", "torch.compile")):
        series = {m or "(no model)": [tuple(pt) for pt in data["curves"][m][b]] for m in models}
        out[f"fastp_{b}"] = Markup(
            charts.step_chart(
                series,
                title=f"fast_p vs {label}",
                x_label=f"p (speedup threshold vs {label})",
                y_label="fast_p",
                x_max=3.0,
                marks=marks,
            )
        )
    out["dist"] = {
        m: {
            b: Markup(
                charts.histogram(
                    data["distributions"][m][b],
                    title=f"speedups vs {b} of correct samples ({m})",
                    x_label=f"speedup vs {'eager' if b == 'eager' else 'torch.compile'} (log2 bins)",
                )
            )
            for b in ("eager", "compile")
        }
        for m in models
    }
    bars = [
        (f"{r['model']} L{r['level']}" if len(models) > 1 else f"level {r['level']}", r["counts"])
        for r in data["verdicts"]["rows"]
        if not r["degenerate"]
    ]
    out["verdicts"] = Markup(
        charts.stacked_bars(bars, title="verdicts per model and level", order=data["verdicts"]["order"])
    )
    return out


def write_run_report(
    store: Any,
    run_name: str,
    out_dir: str | Path | None = None,
    *,
    flags: Mapping[str, Sequence[str]] | None = None,
    n_resamples: int = 2000,
    back_link: str | None = None,
    data: Mapping[str, Any] | None = None,
) -> Path:
    """Write a run's report: ``index.html``, one page per problem under ``problems/``, and ``data/run.json``.

    Args:
        store: a :class:`~kernelbench_harness.store.Store`.
        run_name: the run.
        out_dir: target folder (default ``reports/<run_name>``).
        flags: problem key -> flags (``"degenerate"`` problems are scored apart); merged with stored flags.
        n_resamples: bootstrap resamples.
        back_link: relative link to a parent page (the leaderboard) shown in the navigation.
        data: an already built :func:`build_run_data` dict.

    Returns:
        The path of ``index.html``.

    Raises:
        StoreError: no such run.
    """
    out = Path(out_dir) if out_dir is not None else default_report_dir(run_name)
    data = (
        dict(data)
        if data is not None
        else build_run_data(store, run_name, flags=flags, n_resamples=n_resamples)
    )
    _write_json(out / "data" / "run.json", data)
    env = _env()
    statistic = str(data["settings"]["protocol"].get("statistic", "median"))
    verdict_cols = [
        o for o in data["verdicts"]["order"] if any(r["counts"].get(o) for r in data["verdicts"]["rows"])
    ]
    html = env.get_template("run.html.j2").render(
        run=data["run"],
        models=data["models"],
        metrics=data["metrics"],
        thresholds=data["fast_p_thresholds"],
        charts=_run_charts(data),
        verdicts=data["verdicts"],
        verdict_cols=verdict_cols,
        degenerate=data["degenerate"],
        flags=data["flags"],
        usage=data["usage"],
        problems=data["problems"],
        settings=data["settings"],
        legend=data["legend"],
        error_notes=data["error_notes"],
        statistic=statistic,
        generated_at=data["generated_at"],
        back_link=back_link,
    )
    index = out / "index.html"
    _write(index, html)
    pages = build_problem_data(store, run_name)
    tmpl = env.get_template("problem.html.j2")
    hl_css = Markup(highlight_css())
    flags_by_key = {r["key"]: r["flags"] for r in data["problems"]}
    judge_fp64 = (data["settings"]["protocol"] or {}).get("judge", "fp64-bound") == "fp64-bound"
    for key, p in pages.items():
        level, pid = p["level"], p["problem_id"]
        _write(
            out / "problems" / f"L{level}_{pid}.html",
            tmpl.render(
                p=p,
                flags=flags_by_key.get(key, []),
                hl_css=hl_css,
                generated_at=data["generated_at"],
                notes=data["error_notes"],
                judge_fp64=judge_fp64,
                precision=data["run"]["precision"],
                timed_on_cpu=data["run"]["timed_on_cpu"],
            ),
        )
    log.info("report for %s written to %s (%d problem pages)", run_name, out, len(pages))
    return index


def render_run_report(
    run_name: str,
    *,
    db: str | None = None,
    out_dir: str | Path | None = None,
    flags: Mapping[str, Sequence[str]] | None = None,
    n_resamples: int = 2000,
) -> Path:
    """Open the store at ``db`` and write ``run_name``'s report (see :func:`write_run_report`).

    Returns:
        The path of ``index.html``.

    Raises:
        StoreError: no such run or database.
    """
    from ..store import Store

    with Store(db, read_only=True) as store:
        return write_run_report(store, run_name, out_dir, flags=flags, n_resamples=n_resamples)


# --- leaderboard site ----------------------------------------------------------------------------


def write_leaderboard(
    stores: Sequence[Any],
    out_dir: str | Path = "reports/leaderboard",
    *,
    runs: Sequence[str] | None = None,
    n_resamples: int = 2000,
    flags: Mapping[str, Sequence[str]] | None = None,
) -> Path:
    """Build the static leaderboard site from one or more stores.

    Writes ``data/leaderboard.json``, ``data/reported.json`` and ``data/runs/<run>.json`` first, then
    renders ``index.html`` from those files, and each run's full report under ``runs/<run>/``.

    Args:
        stores: the stores to read (a team's shared PostgreSQL store, local SQLite files...).
        out_dir: site folder.
        runs: run names to include (default: every run with at least one recorded result).
        n_resamples: bootstrap resamples.
        flags: problem flags applied to every run (see :func:`write_run_report`).

    Returns:
        The path of ``index.html``.
    """
    out = Path(out_dir)
    wanted = set(runs) if runs is not None else None
    selected: list[tuple[Any, str, str]] = []
    run_data: dict[str, dict[str, Any]] = {}
    used_dirs: set[str] = set()
    for store in stores:
        for info in store.list_runs():
            if wanted is not None and info.run_name not in wanted:
                continue
            data = build_run_data(store, info.run_name, flags=flags, n_resamples=n_resamples)
            if data["run"]["attempt_count"] == 0 and wanted is None:
                continue
            d = site_run_dir(info.run_name)
            base, i = d, 2
            while d in used_dirs:  # the same run name in two stores
                d, i = f"{base}-{i}", i + 1
            used_dirs.add(d)
            path = f"{d}/index.html"
            selected.append((store, info.run_name, path))
            run_data[path] = data
            write_run_report(store, info.run_name, out / d, data=data, back_link="../../index.html")
            _write_json(out / "data" / "runs" / f"{Path(d).name}.json", data)
    board = build_leaderboard_data(selected, run_data=run_data, n_resamples=n_resamples)
    reported = board.pop("reported")
    _write_json(out / "data" / "leaderboard.json", board)
    _write_json(out / "data" / "reported.json", reported)
    # the page reads the JSON just written (data first, then templates)
    board = json.loads((out / "data" / "leaderboard.json").read_text(encoding="utf-8"))
    reported = json.loads((out / "data" / "reported.json").read_text(encoding="utf-8"))
    rows = sorted(
        board["rows"],
        key=lambda r: (
            _group_order(r["group"]),
            r["hardware"],
            r["protocol"],
            r["precision"],
            -(r["correct_rate"]["value"] or 0),
            r["model"],
        ),
    )
    options = {
        k: sorted(
            {str(r[k]) for r in rows}
            | (
                {str(s[k]) for s in reported["sources"]}
                if k in ("hardware", "protocol", "precision")
                else set()
            ),
            key=_group_order if k == "group" else str,
        )
        for k in ("hardware", "protocol", "precision", "group")
    }
    options["group"] = sorted(
        set(options["group"]) | {r["group"] for s in reported["sources"] for r in s["rows"]}, key=_group_order
    )
    html = (
        _env()
        .get_template("leaderboard.html.j2")
        .render(
            rows=rows,
            groups=board["groups"],
            reported=reported,
            options=options,
            legend=board["legend"],
            generated_at=board["generated_at"],
        )
    )
    index = out / "index.html"
    _write(index, html)
    log.info("leaderboard with %d runs written to %s", len(selected), out)
    return index


def _group_order(g: str) -> tuple[int, int, str]:
    m = re.fullmatch(r"L(\d+)", str(g))
    if m:
        return (1, int(m.group(1)), "")
    return (0, 0 if g == "weighted" else 1, str(g))


# --- export ----------------------------------------------------------------------------------------


def export_run(store: Any, run_name: str, out_dir: str | Path) -> list[Path]:
    """Export a run: ``samples.jsonl``, ``run.json`` and KernelBench-style ``eval_results.json``.

    - ``samples.jsonl``: one JSON object a line per attempt (turn): level, problem_id, name,
      problem_sha256, model, sample_id, turn, best (this turn is the sample's score), backend,
      outcome, tag, compiled, correct, max_abs_err, max_rel_err, candidate_ms, eager_ms,
      compile_ms, speedup_eager, speedup_compile, baselines_ms, tokens, cost_usd, latency_s,
      findings, error and code (so the file can be replayed with ``--model replay:samples.jsonl``).
    - ``run.json``: the run (protocol, config, hardware), its scope with problem hashes and the
      headline metrics.
    - ``level{L}/eval_results.json``: KernelBench's ``eval_results.json`` format for each level
      (``{"<problem_id>": [{"sample_id", "compiled", "correctness", "metadata", "runtime",
      "runtime_stats"}]}``, runtime in ms, -1.0 when not correct; one entry per sample, its best
      turn; the model and turn are in ``metadata``). ``eval_results.json`` at the top is that
      same format for a single-level run, and ``{"level1": {...}, "level2": {...}}`` otherwise.

    Returns:
        The files written.

    Raises:
        StoreError: no such run.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = store.get_run(run_name)
    if info is None:
        from ..errors import StoreError

        raise StoreError(f"no run named {run_name!r} in this store", fix="see `kbench runs list`")
    frame = store.results_frame(run_name)
    scores = sample_scores(frame)
    best = set(scores["result_id"].tolist()) if len(scores) else set()
    written: list[Path] = []

    keep = (
        "level",
        "problem_id",
        "name",
        "problem_sha256",
        "model",
        "sample_id",
        "turn",
        "backend",
        "outcome",
        "tag",
        "compiled",
        "correct",
        "has_speedup",
        "max_abs_err",
        "max_rel_err",
        "allclose_kernelbench",
        "candidate_ms",
        "eager_ms",
        "compile_ms",
        "speedup_eager",
        "speedup_compile",
        "baselines_ms",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "reasoning_tokens",
        "cost_usd",
        "latency_s",
        "generation_error",
        "findings",
        "error",
        "device",
        "code",
        "result_id",
    )
    lines = []
    for rec in frame.to_dict("records"):
        d = {"run_name": run_name, **{k: _jsonable(rec.get(k)) for k in keep}}
        d["best"] = rec["result_id"] in best
        lines.append(json.dumps(d, ensure_ascii=False, allow_nan=False))
    p = out / "samples.jsonl"
    _write(p, "\n".join(lines) + ("\n" if lines else ""))
    written.append(p)

    data = build_run_data(store, run_name, n_resamples=2000)
    run_doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "kbench.run_export",
        "run": data["run"],
        "settings": data["settings"],
        "scope": [
            {
                "key": r.key,
                "level": r.level,
                "problem_id": r.problem_id,
                "name": r.name,
                "sha256": r.code_sha256,
            }
            for r in store.run_problems(run_name)
        ],
        "flags": data["flags"],
        "legend": data["legend"],
        "metrics": data["metrics"],
        "verdicts": data["verdicts"],
        "usage": data["usage"],
    }
    p = out / "run.json"
    _write_json(p, run_doc)
    written.append(p)

    per_level = _kernelbench_eval_results(store, scores, frame, info.hardware)
    for level, entries in per_level.items():
        p = out / f"level{level}" / "eval_results.json"
        _write_json(p, entries)
        written.append(p)
    top = (
        next(iter(per_level.values()))
        if len(per_level) == 1
        else {f"level{lv}": e for lv, e in per_level.items()}
    )
    p = out / "eval_results.json"
    _write_json(p, top)
    written.append(p)
    return written


def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, str):
        try:
            return _jsonable(v.item())
        except (TypeError, ValueError):
            return str(v)
    try:
        import pandas as pd

        if v is pd.NA or v is pd.NaT:
            return None
    except ImportError:  # pragma: no cover
        pass
    return v


def _kernelbench_eval_results(
    store: Any, scores: Any, frame: Any, hardware: Mapping[str, Any]
) -> dict[int, dict[str, list]]:
    from .data import hardware_label

    by_id = {int(r["result_id"]): r for r in frame.to_dict("records")} if len(frame) else {}
    out: dict[int, dict[str, list]] = {}
    if not len(scores):
        return out
    hw = hardware_label(hardware)
    for s in scores.sort_values(["level", "problem_id", "model", "sample_id"]).to_dict("records"):
        r = by_id[int(s["result_id"])]
        ok = s["outcome"] in PASSED_OUTCOMES
        cand = _jsonable(r.get("candidate_ms"))
        timed = ok and cand is not None
        stats = store.timing_samples(int(s["result_id"])) if timed else None
        rstats: dict[str, Any] = {}
        if timed:
            rstats = {"mean": cand, "hardware": hw, "device": r.get("device") or ""}
            if stats is not None:
                rstats.update(
                    mean=stats.mean_ms,
                    median=stats.median_ms,
                    std=stats.std_ms,
                    min=stats.min_ms,
                    max=stats.max_ms,
                    num_trials=stats.n,
                    statistic=stats.statistic,
                    timer=stats.timer,
                )
        entry = {
            "sample_id": int(s["sample_id"]),
            "compiled": bool(r.get("compiled")),
            "correctness": bool(ok),
            "metadata": {
                "model": s["model"],
                "turn": int(s["best_turn"]),
                "outcome": s["outcome"],
                "tag": s["tag"],
                "hardware": hw,
                "device": r.get("device") or "",
                "kbench_result_id": int(s["result_id"]),
                "eager_ms": _jsonable(r.get("eager_ms")),
                "compile_ms": _jsonable(r.get("compile_ms")),
                "speedup_eager": _jsonable(s.get("speedup_eager")),
                "speedup_compile": _jsonable(s.get("speedup_compile")),
                **({"error": r.get("error")} if r.get("error") else {}),
            },
            "runtime": cand if timed else -1.0,
            "runtime_stats": _jsonable(rstats),
        }
        out.setdefault(int(s["level"]), {}).setdefault(str(int(s["problem_id"])), []).append(entry)
    return out
