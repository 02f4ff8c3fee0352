"""``kbench models list``: the model adapters and aliases, and whether each is usable now."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from ..adapters import adapter_statuses, list_adapters
from ..config import load_config
from .common import print_full, unbounded


def _mark(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "[red]no[/red]")


@click.group("models")
def models() -> None:
    """Model adapters: provider/model specs, aliases from kbench.toml, offline adapters."""


@models.command("list")
@click.option("--offline", is_flag=True, help="Skip the network checks (server reachability).")
@click.option("--timeout", "timeout_s", type=float, default=1.5, show_default=True,
              help="Seconds to wait for each server.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(offline: bool, timeout_s: float, as_json: bool) -> None:
    """List adapters and aliases and check whether each is usable now.

    \b
    Checks: the provider's SDK is installed (pip extra), its API key is set, and its server
    answers (local OpenAI-compatible servers are asked for /v1/models; cloud endpoints get a
    connection attempt). Aliases come from kbench.toml ($KBENCH_CONFIG or ./kbench.toml) and the
    built-ins cuda-agent, claude, gemini, gpt.
    """
    cfg = load_config()
    statuses = adapter_statuses(list_adapters(cfg), config=cfg, timeout_s=timeout_s,
                                probe_network=not offline)
    if as_json:
        click.echo(json.dumps([{
            "name": s.info.name, "spec": s.info.spec, "provider": s.info.provider, "kind": s.info.kind,
            "description": s.info.description, "usable": s.usable, "extra_installed": s.extra_installed,
            "key_present": s.key_present, "server_reachable": s.server_reachable, "detail": s.detail,
        } for s in statuses], indent=2))
        return
    console = Console()
    table = Table(title="kbench models" + (f" (config: {cfg.path})" if cfg.path else ""))
    table.add_column("--model", overflow="fold")
    table.add_column("resolves to", overflow="fold")
    for col in ("extra", "key", "server", "usable"):
        table.add_column(col, no_wrap=True, min_width=len(col))
    wide = console.width >= 120 or unbounded(console)  # piped: nothing wraps, so show everything
    if wide:
        table.add_column("about")
    for s in statuses:
        spec = s.info.spec if s.info.spec != s.info.name else ""
        row = [s.info.name, spec, _mark(s.extra_installed), _mark(s.key_present), _mark(s.server_reachable),
               "[green]yes[/green]" if s.usable else "[red]no[/red]"]
        from rich.markup import escape

        row[0], row[1] = escape(row[0]), escape(row[1])
        table.add_row(*row, *([escape(s.info.description)] if wide else []))
    print_full(console, table)
    notes = [(s.info.name, s.detail) for s in statuses if s.detail and s.detail != "offline"]
    for name, detail in notes:
        from rich.markup import escape  # "pip install 'kernelbench-harness[openai]'" is text, not markup

        console.print(f"[bold]{escape(name)}[/bold]: {escape(detail)}", highlight=False)


def register(group: click.Group) -> None:
    """Add this module's commands to the ``kbench`` group."""
    group.add_command(models)
