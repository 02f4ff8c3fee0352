"""``kbench problems list`` and ``kbench protocols show``."""

from __future__ import annotations

import json
import math

import click
from rich.console import Console
from rich.table import Table

from ..core import LAUNCH_BOUND_US
from ..problems import load_problems
from ..protocols import PROTOCOL_NAMES, get_protocol
from .common import (FiniteFloatRange, check_problems_source, ids_option, level_option, parse_levels, print_full,
                     problems_option, unbounded)


@click.group("problems")
def problems_group() -> None:
    """Inspect problem sources."""


@problems_group.command("list")
@problems_option
@level_option
@ids_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
def list_cmd(problems: str | None, level: str | None, ids: str | None, as_json: bool) -> None:
    """List the problems a source provides (and the files it skipped, with the reason)."""
    check_problems_source(problems)
    ps = load_problems(problems, levels=parse_levels(level), ids=ids)
    if as_json:
        for p in ps.problems:
            click.echo(json.dumps({"level": p.level, "problem_id": p.problem_id, "name": p.name,
                                   "code_sha256": p.code_sha256, "source": p.source}))
        return
    con = Console()
    t = Table(title=f"{len(ps.problems)} problems from {ps.source}")
    for c in ("level", "id", "name", "sha256"):
        t.add_column(c)
    for p in ps.problems:
        t.add_row(str(p.level), str(p.problem_id), p.name, p.code_sha256[:12])
    print_full(con, t)
    counts = ", ".join(f"level {lv}: {n}" for lv, n in ps.counts_by_level().items())
    con.print(counts or "no problems")
    for iss in ps.issues:
        con.print(f"[yellow]skipped[/] {iss.path}: {iss.reason}")


@problems_group.command("audit")
@problems_option
@level_option
@ids_option
@click.option("--device", default="cpu", show_default=True, metavar="DEVICE",
              help="Where references run: cpu, cuda or cuda:N (launch-bound is only flagged on a GPU).")
@click.option("--protocol", "protocols", multiple=True, type=click.Choice(PROTOCOL_NAMES),
              help="Protocol whose judge decides trivial-passes (repeatable; default: all three).")
@click.option("--precision", default="fp32", show_default=True, type=click.Choice(["fp32", "fp16", "bf16"]))
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(2, 64), help="Input sets drawn per problem.")
@click.option("--max-elements", default=None, metavar="N",
              help="Skip problems whose forward inputs plus weights exceed N elements (e.g. 2e8); "
                   "recorded as skipped-size.")
@click.option("--timeout", "timeout_s", default=300.0, show_default=True,
              type=FiniteFloatRange(0, min_open=True, hint="give seconds, e.g. --timeout 300"),
              help="Time limit per problem, seconds (recorded as skipped-time).")
@click.option("--budget", "budget_s", default=None,
              type=FiniteFloatRange(0, min_open=True,
                                    hint="give seconds, e.g. --budget 3600, or leave --budget out for no budget"),
              help="Time budget for the whole audit, seconds.")
@click.option("--order", default="given", show_default=True, type=click.Choice(["given", "size"]),
              help="Audit order; size: smallest problems first.")
@click.option("--launch-bound-us", default=LAUNCH_BOUND_US, show_default=True,
              type=FiniteFloatRange(0, hint=f"give microseconds, e.g. --launch-bound-us {LAUNCH_BOUND_US:g}"),
              help="Eager time under which a problem is launch-bound (GPU only), microseconds.")
@click.option("--threads", default=None, type=click.IntRange(1, 1024),
              help="CPU threads of the audit process (default: torch's; 1 is fastest on a busy small CPU).")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False), help="Write the audit as JSON here.")
@click.option("--load", "load", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Read reports from an audit JSON (e.g. a GPU audit) instead of running the audit.")
@click.option("--run", "run_name", default=None, metavar="RUN_NAME",
              help="Store the flags on this run, so its reports score flagged problems apart.")
@click.option("--db", "db", default=None, metavar="URL",
              help="Results store for --run (as for `kbench run`). Default: sqlite:///results/kbench.db")
@click.option("--all", "show_all", is_flag=True, help="List every problem, not only flagged ones.")
def audit_cmd(problems: str | None, level: str | None, ids: str | None, device: str, protocols: tuple[str, ...],
              precision: str, seeds: int, max_elements: str | None, timeout_s: float, budget_s: float | None,
              order: str, launch_bound_us: float, threads: int | None, out: str | None, load: str | None,
              run_name: str | None, db: str | None, show_all: bool) -> None:
    """Flag problems on which a trivial candidate passes, whose output ignores the input or is
    nondeterministic, that take integer inputs, or whose eager time is launch-bound.

    \b
    Examples:
      kbench problems audit --problems ../shared/kernelbench --level 1-3 --max-elements 2e8 --out audit.json
      kbench problems audit --load audit.json --run my-run    # store the flags on a run
    """
    import sys
    from pathlib import Path

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..audit import (
        AuditReport,
        audit_problems,
        audit_to_json,
        flag_counts,
        known_defect_status,
        load_audit_json,
        run_flags,
    )
    from ..errors import ConfigError

    limit: int | None = None
    if max_elements is not None:
        try:
            n = float(max_elements)
        except ValueError:
            n = math.nan
        if not (math.isfinite(n) and n >= 1):  # nan, inf, 0 and negatives would skip (or keep) every problem
            raise ConfigError(f"bad --max-elements {max_elements!r}: it must be a positive, finite number",
                              fix="give a number of elements such as 2e8, or leave --max-elements out for no limit")
        limit = int(n)
    check_problems_source(problems)
    con = Console()
    env: dict[str, object] = {}
    settings = {"device": device, "protocols": list(protocols) or list(PROTOCOL_NAMES), "precision": precision,
                "seeds": seeds, "max_elements": limit, "timeout_s": timeout_s, "budget_s": budget_s,
                "order": order, "launch_bound_us": launch_bound_us, "threads": threads}
    if load:
        reports: list[AuditReport] = load_audit_json(load)
        keep = {p.key for p in load_problems(problems, levels=parse_levels(level), ids=ids).problems} \
            if (problems or level or ids) else None
        if keep is not None:
            reports = [r for r in reports if r.key in keep]
        settings["loaded_from"] = str(load)
    else:
        ps = load_problems(problems, levels=parse_levels(level), ids=ids)
        settings["problems"] = ps.source
        protos = [get_protocol(n, precision) for n in (protocols or PROTOCOL_NAMES)]
        plain = not sys.stdout.isatty()
        with Progress(TextColumn("audit"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[last]}"), console=con, disable=plain) as bar:
            task = bar.add_task("audit", total=len(ps.problems), last="")
            partial = Path(out + ".progress.jsonl") if out else None  # survives an interrupted audit
            if partial is not None:
                partial.parent.mkdir(parents=True, exist_ok=True)  # as --out of report and export
                partial.write_text("", encoding="utf-8")

            def shown(r: AuditReport) -> None:
                bar.update(task, advance=1, last=f"{r.key} {' '.join(map(str, r.flags))}"[:60])
                if plain:
                    click.echo(f"{r.key} {r.name}: {', '.join(map(str, r.flags)) or 'ok'} ({r.seconds:.1f} s)")
                if partial is not None:
                    with partial.open("a", encoding="utf-8") as f:
                        f.write(json.dumps(r.to_dict()) + "\n")

            reports = audit_problems(list(ps.problems), device=device, protocol=protos, seeds=seeds,
                                     max_elements=limit, launch_bound_us=launch_bound_us, timeout_s=timeout_s,
                                     budget_s=budget_s, order=order, on_report=shown, environment=env,
                                     threads=threads)
    t = Table(title=f"audit of {len(reports)} problems ({device})")
    for c in ("problem", "name", "flags", "eager ms"):
        t.add_column(c)
    for r in reports:
        if r.flags or show_all:
            t.add_row(r.key, r.name, ", ".join(map(str, r.flags)) or "-",
                      "-" if r.eager_ms is None else f"{r.eager_ms:.4g}")
    print_full(con, t)
    counts = flag_counts(reports)
    con.print("flags: " + (", ".join(f"{k} {v}" for k, v in counts.items()) or "none"))
    for d in known_defect_status(reports):
        if d["status"] != "absent":
            con.print(f"known defect {d['key']} ({d['description']}): {d['status']}")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(audit_to_json(reports, settings=settings, environment=env), indent=1),
                             encoding="utf-8")
        Path(out + ".progress.jsonl").unlink(missing_ok=True)
        con.print(f"wrote {out}")
    if run_name:
        from ..store import Store

        with Store(db, create=False) as store:
            info = store.get_run(run_name)
            if info is None:
                raise ConfigError(f"no run named {run_name!r} in {store.safe_url}", fix="see `kbench runs list`")
            scope = {p.key: p.code_sha256 for p in store.run_problems(run_name)}
            flags = run_flags(reports, info.protocol_name)
            matched = {k: v for k, v in flags.items()
                       if k in scope and next(r for r in reports if r.key == k).code_sha256 == scope[k]}
            other = sorted(k for k in flags if k in scope and k not in matched)
            store.set_problem_flags(run_name, matched)
        con.print(f"stored flags of {len(matched)} problem(s) on run {run_name}"
                  + (f"; {len(other)} skipped (their source differs from the run's): {', '.join(other)}"
                     if other else ""))


@click.group("protocols")
def protocols_group() -> None:
    """Inspect evaluation protocols."""


@protocols_group.command("show")
@click.argument("name", required=False, type=click.Choice(PROTOCOL_NAMES))
@click.option("--precision", default="fp32", type=click.Choice(["fp32", "fp16", "bf16"]))
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: {name, fingerprint, settings} (a list of them when NAME is omitted).")
def show_cmd(name: str | None, precision: str, as_json: bool) -> None:
    """Print every setting of a protocol with what it means (all three side by side when NAME is omitted).

    Any setting can be changed for one run with `-P KEY=VALUE` on `kbench run` and `kbench baseline`.
    """
    import re

    from rich.console import Console
    from rich.table import Table

    from ..protocols import setting_descriptions

    names = [name] if name else list(PROTOCOL_NAMES)
    protos = {n: get_protocol(n, precision) for n in names}
    if as_json:
        docs = [{"name": n, "fingerprint": p.fingerprint(), "settings": p.to_dict()} for n, p in protos.items()]
        click.echo(json.dumps(docs[0] if name else docs, indent=2))
        return
    about = {k: re.sub(r":\w+:`~?([^`]+)`", r"\1", v).replace("``", "`") for k, v in setting_descriptions().items()}
    console = Console()
    if unbounded(console):
        # piped with no $COLUMNS: rich would take the width of a terminal on stdin or stderr (the wide table in a
        # file or `less`); the output gets 80 columns instead, and so the narrow layout below
        console.width = 80
    # the header: each protocol's fingerprint on a line of its own beside its name, never broken by rich
    # (soft_wrap); a title listing all three wrapped between a name and its fingerprint at 80 columns
    console.print(f"[bold]{'protocol' if name else 'protocols'} at {precision}, fingerprint{'' if name else 's'}:[/]")
    width = max(map(len, names))
    for n, p in protos.items():
        console.print(f"  {n:<{width}}  {p.fingerprint()}", soft_wrap=True, highlight=False)
    dicts = {n: p.to_dict() for n, p in protos.items()}
    if console.width < (110 if name else 150):
        # a narrow terminal (80 columns): a table squeezes the values and meanings into a few characters a
        # line, so each setting gets a block instead: its name and value(s), then its meaning on full lines
        from rich.markup import escape
        from rich.padding import Padding

        for key in dicts[names[0]]:
            values = [json.dumps(dicts[n][key]) for n in names]
            differ = not name and len(set(values)) > 1
            shown = ("; ".join(f"{n} [bold]{escape(v)}[/]" for n, v in zip(names, values)) if differ
                     else escape(values[0]) + ("" if name else " (in all)"))
            console.print(f"\n[cyan]{key}[/] = {shown}", soft_wrap=False, overflow="fold")
            console.print(Padding(escape(about.get(key, "")), (0, 0, 0, 4), expand=False), style="dim")
        console.print("\nChange one setting for a run with -P KEY=VALUE (e.g. -P placements=2); --json prints the "
                      "stored form.")
        return
    table = Table()
    table.add_column("setting", no_wrap=True)
    for n in names:
        table.add_column(n if not name else "value", overflow="fold", max_width=None if name else 22)
    table.add_column("meaning")
    for key in dicts[names[0]]:
        values = [json.dumps(dicts[n][key]) for n in names]
        if not name and len(set(values)) > 1:
            values = [f"[bold]{v}[/]" for v in values]
        table.add_row(key, *values, about.get(key, ""))
    console.print(table)
    console.print("Change one setting for a run with -P KEY=VALUE (e.g. -P placements=2); --json prints the "
                  "stored form.")


def register(group: click.Group) -> None:
    """Add ``problems`` and ``protocols`` to the ``kbench`` group."""
    group.add_command(problems_group)
    group.add_command(protocols_group)
