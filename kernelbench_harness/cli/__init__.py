"""The ``kbench`` command: a click group whose commands live in one module each.

Each command module exposes ``register(group)``; commands parse, call the library, and print.
"""

from __future__ import annotations

import errno
import logging
import sys

import click

from ..errors import KbenchError

__all__ = ["main", "cli"]

# errors of a path the user chose (--out, --db, an audit file) that cannot be written or made: no traceback
_PATH_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR,
                          errno.EISDIR, errno.ENAMETOOLONG})


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="kernelbench-harness", prog_name="kbench")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """kbench: evaluate LLM-written GPU kernels on KernelBench problems, honestly.

    \b
    Typical use:
      kbench problems list                       # the bundled suite
      kbench run --model bundled                 # evaluate our example solutions (CPU ok)
      kbench run --model replay:gens.jsonl --problems path/to/KernelBench --level 1
      kbench run --model cuda-agent --problems path/to/KernelBench --level 1-3
      kbench report RUN_NAME                     # HTML report under reports/RUN_NAME/
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def _register_all() -> None:
    from . import models_cmd, problems_cmd, report_cmd, run_cmd

    for mod in (problems_cmd, run_cmd, report_cmd, models_cmd):
        mod.register(cli)


_register_all()


def main() -> None:
    """Console entry point: runs the group and prints :class:`KbenchError` without a traceback."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        runner = sys.modules.get("kernelbench_harness.runner")
        for name, db in (getattr(runner, "INTERRUPTED", None) or [])[-1:]:
            click.echo(f"run {name} is stored as interrupted; continue it with: {runner.resume_command(name, db)}",
                       err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KbenchError as e:
        click.secho(f"error: {e.message}", fg="red", err=True)
        if e.fix:
            click.echo(f"  fix: {e.fix}", err=True)
        sys.exit(2)
    except OSError as e:
        if e.errno not in _PATH_ERRNOS or not e.filename:
            raise
        logging.getLogger(__name__).debug("path error", exc_info=True)
        click.secho(f"error: cannot write {e.filename}: {e.strerror}", fg="red", err=True)
        click.echo("  fix: pass a path in a folder you can write (--out, --db), or free space there", err=True)
        sys.exit(2)
