"""``kbench problems list`` and ``kbench protocols show``."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from ..problems import load_problems
from ..protocols import PROTOCOL_NAMES, get_protocol
from .common import ids_option, level_option, parse_levels, problems_option


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
    con.print(t)
    counts = ", ".join(f"level {lv}: {n}" for lv, n in ps.counts_by_level().items())
    con.print(counts or "no problems")
    for iss in ps.issues:
        con.print(f"[yellow]skipped[/] {iss.path}: {iss.reason}")


@click.group("protocols")
def protocols_group() -> None:
    """Inspect evaluation protocols."""


@protocols_group.command("show")
@click.argument("name", required=False, type=click.Choice(PROTOCOL_NAMES))
@click.option("--precision", default="fp32", type=click.Choice(["fp32", "fp16", "bf16"]))
def show_cmd(name: str | None, precision: str) -> None:
    """Print every setting of a protocol (all three when NAME is omitted)."""
    for n in [name] if name else PROTOCOL_NAMES:
        p = get_protocol(n, precision)
        click.echo(f"# {n} (fingerprint {p.fingerprint()})")
        click.echo(json.dumps(p.to_dict(), indent=2))


def register(group: click.Group) -> None:
    """Add ``problems`` and ``protocols`` to the ``kbench`` group."""
    group.add_command(problems_group)
    group.add_command(protocols_group)
