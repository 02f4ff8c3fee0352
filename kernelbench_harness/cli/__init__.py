"""The ``kbench`` command: a click group whose commands live in one module each.

Each command module exposes ``register(group)``; commands parse, call the library, and print.

Stopping: Ctrl-C, a SIGINT sent to the process alone and a SIGTERM all stop a command the same way (a run is
stored as ``interrupted`` and the CLI prints how to resume it); the exit status is 130 after SIGINT, 143 after
SIGTERM (128 + the signal's number). SIGINT is caught even when the process started with it ignored, as a
non-interactive shell leaves every command it starts in the background (``kbench run ... &`` in a script):
CPython then leaves it ignored, and such a run could not be stopped but by SIGKILL. An ignored SIGTERM is left
ignored (someone chose that).
"""

from __future__ import annotations

import errno
import logging
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

import click

from ..errors import KbenchError

__all__ = ["STOP_EXIT", "cli", "main"]

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


#: exit status of a command stopped by each signal (the shells' 128 + the signal's number)
STOP_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
_stopped_by: list[signal.Signals] = []  # SIGTERM once it arrived (SIGINT is the default)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: stop as SIGINT does, through the SIGINT handler in force (asyncio's, while a run's event loop
    runs: it cancels the run, which stores itself as interrupted; else Python's, which raises
    KeyboardInterrupt)."""
    _stopped_by.append(signal.SIGTERM)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt  # SIGINT ignored or at its default: someone changed what kbench set at the start


def _stop_on_signals() -> Callable[[], None]:
    """Make SIGINT (even when inherited ignored) and SIGTERM (unless inherited ignored) raise KeyboardInterrupt
    in the main thread, as Ctrl-C does (see the module docstring). Returns what puts the handlers back."""
    _stopped_by.clear()
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    if before[signal.SIGINT] in (signal.SIG_IGN, signal.SIG_DFL):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if before[signal.SIGTERM] == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)

    def restore() -> None:
        for sig, handler in before.items():
            if handler is not None:
                signal.signal(sig, handler)

    return restore


def main() -> None:
    """Console entry point: runs the group and prints :class:`KbenchError` without a traceback.

    Ctrl-C, SIGINT and SIGTERM print ``aborted`` (and how to resume a run they cut) and exit with
    :data:`STOP_EXIT` of the signal.
    """
    restore = _stop_on_signals()
    try:
        _main()
    finally:
        restore()  # for a caller that goes on (a test)


def _main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        stop = _stopped_by[0] if _stopped_by else signal.SIGINT
        click.echo("aborted" if stop == signal.SIGINT else f"aborted ({stop.name})", err=True)
        runner = sys.modules.get("kernelbench_harness.runner")
        for name, db in (getattr(runner, "INTERRUPTED", None) or [])[-1:]:
            click.echo(f"run {name} is stored as interrupted; continue it with: {runner.resume_command(name, db)}",
                       err=True)
        sys.exit(STOP_EXIT[stop])
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
