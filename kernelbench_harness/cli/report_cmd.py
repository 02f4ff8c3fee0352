"""Commands that read the store: ``report``, ``export``, ``show``, ``runs list``, ``leaderboard``, ``baselines``;
and ``db upgrade``, which brings an older store's schema up to this kbench's (the read-only commands open the
store read-only and never upgrade it)."""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path
from typing import Any

import click

from ..errors import ConfigError
from .common import check_problems_source, print_full, unbounded

_DB_HELP = (
    "Results database URL (default sqlite:///results/kbench.db; postgresql+psycopg://... for a shared store)."
)


def _store(db: str | None):  # type: ignore[no-untyped-def]
    """The store opened read-only: a running sweep's writes never wait for it, and a read-only file is fine."""
    from ..store import Store

    return Store(db, read_only=True)


def _parse_problem(spec: str) -> tuple[int, int]:
    m = re.fullmatch(r"[Ll]?(\d+)[/:_-](\d+)", spec.strip())
    if not m:
        raise ConfigError(f"bad problem {spec!r}", fix="write it as L1/23 (level 1, problem 23) or 1/23")
    return int(m.group(1)), int(m.group(2))


def _read_flags(path: str | None) -> dict[str, list[str]] | None:
    if not path:
        return None
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"cannot read problem flags from {path}: {e}",
            fix='pass a JSON object like {"L2/83": ["degenerate"]}',
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object of problem key -> list of flags")
    return {str(k): [str(x) for x in (v if isinstance(v, list) else [v])] for k, v in data.items()}


@click.command("report")
@click.argument("run_name")
@click.option("--db", default=None, help=_DB_HELP)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Output folder (default reports/RUN_NAME).",
)
@click.option(
    "--flags",
    "flags_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help='JSON file of problem flags, e.g. {"L2/83": ["degenerate"]}: degenerate problems are scored apart.',
)
@click.option(
    "--resamples", default=2000, show_default=True, help="Bootstrap resamples for the 95% intervals."
)
def report_cmd(
    run_name: str, db: str | None, out_dir: str | None, flags_path: str | None, resamples: int
) -> None:
    """Write RUN_NAME's self-contained HTML report (index.html plus one page per problem)."""
    from ..reporting import write_run_report

    t0 = time.perf_counter()
    with _store(db) as store:
        index = write_run_report(
            store, run_name, out_dir, flags=_read_flags(flags_path), n_resamples=resamples
        )
    click.echo(f"report written to {index} ({time.perf_counter() - t0:.1f} s); open it in a browser")


@click.command("export")
@click.argument("run_name")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Output folder.")
@click.option("--db", default=None, help=_DB_HELP)
def export_cmd(run_name: str, out_dir: str, db: str | None) -> None:
    """Export RUN_NAME: samples.jsonl (one line per attempt), run.json and KernelBench-style eval_results.json."""
    from ..reporting import export_run

    with _store(db) as store:
        files = export_run(store, run_name, out_dir)
    for f in files:
        click.echo(str(f))


@click.command("show")
@click.argument("run_name")
@click.argument("problem")
@click.option("--db", default=None, help=_DB_HELP)
@click.option("--model", default=None, help="Only this model's samples.")
@click.option("--sample", "sample_id", type=int, default=None, help="Only this sample id.")
@click.option("--full", is_flag=True, help="Print whole prompts, replies and code (default: trimmed).")
def show_cmd(
    run_name: str, problem: str, db: str | None, model: str | None, sample_id: int | None, full: bool
) -> None:
    """Print the turns of PROBLEM's samples in RUN_NAME (PROBLEM like L1/23 or 1/23): prompt, reply, verdict."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.table import Table
    from rich.text import Text  # stored text is shown as it is: never read as rich markup

    level, pid = _parse_problem(problem)
    console = Console()
    with _store(db) as store:
        if store.get_run(run_name) is None:
            from ..errors import StoreError

            raise StoreError(f"no run named {run_name!r} in this store", fix="see `kbench runs list`")
        frame = store.results_frame(run_name)
        f = frame[(frame["level"] == level) & (frame["problem_id"] == pid)]
        if model is not None:
            f = f[f["model"] == model]
        if sample_id is not None:
            f = f[f["sample_id"] == sample_id]
        keys = sorted({(str(m), int(s)) for m, s in zip(f["model"], f["sample_id"])})
        if not keys:
            from ..errors import StoreError

            recorded = sorted({(int(lv), int(p)) for lv, p in zip(frame["level"], frame["problem_id"])})
            listed = ", ".join(f"L{lv}/{p}" for lv, p in recorded[:20]) + (" ..." if len(recorded) > 20 else "")
            raise StoreError(f"no recorded sample for L{level}/{pid} in run {run_name!r}"
                             + (f" (model {model!r})" if model else "") + (f" (sample {sample_id})" if sample_id is not None else ""),
                             fix=(f"the run has samples for {listed}" if recorded else "the run has no samples yet")
                                 + f"; `kbench show {run_name} L<level>/<id>` shows one")
        limit = None if full else 1500

        def trim(text: str) -> str:
            if limit is None or len(text) <= limit:
                return text
            return text[:limit] + f"\n... ({len(text) - limit} more characters; --full shows all)"

        for m, s in keys:
            heading = Text(f"L{level}/{pid} · {m} · sample {s}")
            if unbounded(console) and heading.cell_len + 6 > console.width:
                console.print(heading, soft_wrap=True)  # a rule would cut a long model name to 80 columns
            else:
                console.rule(heading)
            for a in store.attempts_for_sample(run_name, level, pid, m, s):
                r = a.result
                t = Table(show_header=False, box=None)
                verdict = f"{r.outcome}({r.tag})" if r.tag else str(r.outcome)
                t.add_row("verdict", f"[bold]{verdict}[/bold]")
                t.add_row(
                    "times (ms)",
                    f"candidate {_fmt(r.candidate_ms)}, eager {_fmt(r.eager_ms)}, "
                    f"torch.compile {_fmt(r.compile_ms)}",
                )
                t.add_row(
                    "speedup",
                    f"{_fmt(r.speedup_eager, 'x')} vs eager, {_fmt(r.speedup_compile, 'x')} vs torch.compile",
                )
                if r.max_abs_err is not None:
                    t.add_row("max abs / rel err", f"{r.max_abs_err:.3g} / {_fmt(r.max_rel_err)}")
                for fd in r.findings:
                    t.add_row("finding", Text(f"{fd.severity} {fd.check} {fd.tag}: {fd.message}"))
                if r.error:
                    t.add_row("error", Text(trim(r.error)))
                print_full(console, Panel(t, title=f"turn {a.turn} ({a.backend})", expand=False))
                for msg in a.messages or []:
                    console.print(
                        Panel(
                            Text(trim(str(msg.get("content", "")))),
                            title=Text(f"prompt: {msg.get('role', '?')}"),
                            border_style="blue",
                        )
                    )
                if a.reply:
                    console.print(Panel(Text(trim(a.reply)), title="reply", border_style="green"))
                elif a.code:
                    console.print(Syntax(trim(a.code), "python", line_numbers=True))


def _fmt(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:.3g}{unit}"


@click.group("runs")
def runs_group() -> None:
    """Runs in the results store."""


@runs_group.command("list")
@click.option("--db", default=None, help=_DB_HELP)
def runs_list_cmd(db: str | None) -> None:
    """List the runs in the store."""
    from rich.console import Console
    from rich.table import Table

    from ..reporting import hardware_label
    from ..reporting.data import protocol_changes, protocol_label

    with _store(db) as store:
        runs = store.list_runs()
        table = Table(title=f"runs in {store.safe_url}")
        longest = max((len(r.run_name) for r in runs), default=3)
        table.add_column("run", min_width=min(longest, 40), overflow="fold")
        for col in (
            "model",
            "status",
            "protocol",
            "precision",
            "hardware",
            "problems",
            "attempts",
            "created",
        ):
            right = col in ("problems", "attempts")
            table.add_column(col, justify="right" if right else "left", overflow="fold")
        for r in runs:
            n = len(store.done_attempts(r.run_name))
            table.add_row(
                r.run_name,
                r.model,
                r.status,
                protocol_label(r.protocol_name, protocol_changes(r.protocol_name, r.precision, r.protocol)),
                r.precision,
                hardware_label(r.hardware),
                str(r.problem_count),
                str(n),
                r.created_at.strftime("%Y-%m-%d %H:%M"),
            )
    console = Console()
    if runs:
        print_full(console, table)
        for r in runs:  # who runs each running run, and why one stored as running reads as interrupted
            if r.status_note:
                line = f"{r.run_name}: {r.status}, {r.status_note}"
                if r.status == "interrupted":
                    line += f"; continue it with: kbench run --run-name {shlex.quote(r.run_name)} --resume" + (
                        f" --db {shlex.quote(db)}" if db else "")
                console.print(line, markup=False, highlight=False, soft_wrap=True)
    else:
        console.print("no runs yet: start one with `kbench run`")


@click.command("leaderboard")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default="reports/leaderboard",
    show_default=True,
    help="Site folder (reports/site holds the published leaderboard: rebuild it only from its store).",
)
@click.option("--db", "dbs", multiple=True, help=_DB_HELP + " Repeat to combine several stores.")
@click.option(
    "--run", "runs", multiple=True, help="Only these runs (repeatable; default: every run with results)."
)
@click.option(
    "--flags",
    "flags_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="JSON file of problem flags applied to every run (degenerate problems are scored apart).",
)
@click.option(
    "--resamples", default=2000, show_default=True, help="Bootstrap resamples for the 95% intervals."
)
@click.option("--replace", is_flag=True,
              help="Write over a leaderboard in --out that shows runs this one would not (other stores', or "
                   "runs left out by --run).")
def leaderboard_cmd(
    out_dir: str, dbs: tuple[str, ...], runs: tuple[str, ...], flags_path: str | None, resamples: int,
    replace: bool,
) -> None:
    """Build the static leaderboard site: data/*.json first, then pages (each run's report under runs/)."""
    from ..reporting import write_leaderboard

    stores = [_store(db) for db in (dbs or (None,))]
    try:
        known = {r.run_name for st in stores for r in st.list_runs()}
        if runs:
            missing = [r for r in runs if r not in known]
            if missing:
                from ..errors import StoreError

                raise StoreError(f"no run named {', '.join(map(repr, missing))} in "
                                 + ("these stores" if len(stores) > 1 else "this store"),
                                 fix="see `kbench runs list` (with the same --db)")
        lost = sorted(_leaderboard_runs(Path(out_dir)) - (set(runs) if runs else known))
        if lost and not replace:
            raise ConfigError(f"{out_dir} holds a leaderboard with run(s) this one would not show "
                              f"({', '.join(lost[:5])}{' ...' if len(lost) > 5 else ''}); writing it would drop them",
                              fix="pass the store(s) it was built from with --db, choose another --out, or pass "
                                  "--replace")
        index = write_leaderboard(
            stores, out_dir, runs=list(runs) or None, n_resamples=resamples, flags=_read_flags(flags_path)
        )
    finally:
        for s in stores:
            s.close()
    click.echo(f"leaderboard written to {index}")


def _leaderboard_runs(out_dir: Path) -> set[str]:
    """The run names a leaderboard already written in ``out_dir`` shows (none when there is none)."""
    import json

    try:
        data = json.loads((out_dir / "data" / "leaderboard.json").read_text(encoding="utf-8"))
        return {str(r["run_name"]) for r in data.get("rows", []) if isinstance(r, dict) and r.get("run_name")}
    except (OSError, ValueError, TypeError, AttributeError):
        return set()


@click.group("baselines")
def baselines_group() -> None:
    """Baseline timings: import and export KernelBench's JSON files."""


@baselines_group.command("import")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--problems",
    "problems_src",
    required=True,
    help="The problem set the timings belong to (a KernelBench folder, .jsonl, hf:...).",
)
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]), default="fp32", show_default=True)
@click.option("--db", default=None, help=_DB_HELP)
def baselines_import_cmd(folder: str, problems_src: str, precision: str, db: str | None) -> None:
    """Import KernelBench baseline JSON files from FOLDER (stored as imported, not measured here)."""
    from ..baselines_io import import_kernelbench_baselines
    from ..problems import load_problems
    from ..store import Store

    check_problems_source(problems_src)
    ps = load_problems(problems_src)
    with Store(db) as store:
        summary = import_kernelbench_baselines(store, folder, ps.problems, precision=precision)
    click.echo(
        f"stored {summary.stored} baselines ({', '.join(f'{k}: {v}' for k, v in summary.by_mode.items())}); "
        f"{len(summary.unmatched)} entries matched no problem"
    )


@baselines_group.command("export")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True)
@click.option("--hardware-fingerprint", required=True,
              help="Which hardware's baselines to export (`kbench baselines list` shows them).")
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]), default="fp32", show_default=True)
@click.option("--db", default=None, help=_DB_HELP)
def baselines_export_cmd(out_dir: str, hardware_fingerprint: str, precision: str, db: str | None) -> None:
    """Write stored baselines as KernelBench JSON files (baseline_time_torch*.json)."""
    from ..baselines_io import export_kernelbench_baselines

    with _store(db) as store:
        files = export_kernelbench_baselines(
            store, out_dir, hardware_fingerprint=hardware_fingerprint, precision=precision
        )
        have = _baseline_groups(store) if not files else []
    for f in files:
        click.echo(str(f))
    if not files:
        stored = "; ".join(f"{g['hardware_fingerprint']} {g['precision']} ({g['gpu']}, {g['count']})" for g in have)
        raise ConfigError(f"no baselines stored for hardware fingerprint {hardware_fingerprint!r} at {precision}",
                          fix=(f"stored: {stored}" if stored else "the store holds no baselines; measure them with "
                               "`kbench baseline` or import KernelBench's with `kbench baselines import`")
                              + " (`kbench baselines list` shows them)")


def _baseline_groups(store: Any) -> list[dict[str, Any]]:
    """The store's baselines grouped by hardware fingerprint, precision and origin: the GPU (or CPU) name,
    how many, measured here or imported."""
    groups: dict[tuple[str, str, bool], dict[str, Any]] = {}
    for b in store.baselines():
        key = (b.hardware_fingerprint, b.precision, b.measured_here)
        g = groups.setdefault(key, {"hardware_fingerprint": b.hardware_fingerprint, "precision": b.precision,
                                    "measured_here": b.measured_here, "count": 0,
                                    "gpu": str((b.hardware or {}).get("device_name") or (b.hardware or {}).get("gpu_name")
                                               or (b.hardware or {}).get("name") or "?")})
        g["count"] += 1
    return sorted(groups.values(), key=lambda g: (g["hardware_fingerprint"], g["precision"]))


@baselines_group.command("list")
@click.option("--db", default=None, help=_DB_HELP)
def baselines_list_cmd(db: str | None) -> None:
    """The stored baselines by hardware fingerprint and precision (what `baselines export` takes)."""
    with _store(db) as store:
        groups = _baseline_groups(store)
    if not groups:
        click.echo("no baselines stored")
        return
    for g in groups:
        click.echo(f"{g['hardware_fingerprint']}  {g['precision']}  {g['count']:>5}  "
                   f"{'measured' if g['measured_here'] else 'imported'}  {g['gpu']}")


@click.group("db")
def db_group() -> None:
    """The results store itself."""


@db_group.command("upgrade")
@click.option("--db", default=None, help=_DB_HELP)
def db_upgrade_cmd(db: str | None) -> None:
    """Upgrade the store's schema to this kbench's (read-only commands refuse an older one; runs upgrade it too).

    Older kbench versions cannot open the store afterwards.
    """
    from ..store import Store

    with Store(db, create=False) as store:  # opening for writing upgrades it, in one transaction
        click.echo(f"{store.safe_url} is at schema revision {store.schema_revision()}")


def register(group: click.Group) -> None:
    """Add this module's commands to the ``kbench`` group."""
    for cmd in (report_cmd, export_cmd, show_cmd, runs_group, leaderboard_cmd, baselines_group, db_group):
        group.add_command(cmd)
