"""``kbench run`` and ``kbench baseline``."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ..problems import load_problems, parse_id_ranges
from ..protocols import COMPILE_MODES, PRECISIONS, PROTOCOL_NAMES, get_protocol
from ..runner import PHASES, RunConfig, RunSummary, execute_run, measure_baselines_for
from .common import (
    FiniteFloatRange,
    check_problems_source,
    db_option,
    ids_option,
    level_option,
    parse_gpus,
    parse_kv,
    parse_levels,
    print_full,
    problems_option,
)

__all__ = ["register"]


class RichProgress:
    """One progress bar per phase (generate, build, verify, time) with counts, rate and ETA.

    The bars appear when the runner first reports work: a run that fails its checks draws nothing.
    """

    def __init__(self, console: Console) -> None:
        self.p = Progress(TextColumn("{task.description:>9}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("eta"),
                          TimeRemainingColumn(), console=console, transient=False)
        self.tasks: dict[str, TaskID] = {}
        self.t0 = time.perf_counter()

    def __enter__(self) -> "RichProgress":
        return self

    def __exit__(self, *a: Any) -> None:
        if self.tasks:
            self.p.__exit__(*a)

    def _start(self) -> None:
        if not self.tasks:
            self.p.__enter__()
            for ph in PHASES:
                self.tasks[ph] = self.p.add_task(ph, total=0, rate="")

    def total(self, phase: str, n: int) -> None:
        self._start()
        t = self.tasks[phase]
        cur = self.p.tasks[t].total or 0
        self.p.update(t, total=cur + n)

    def advance(self, phase: str, n: int = 1) -> None:
        self._start()
        t = self.tasks[phase]
        self.p.advance(t, n)
        done = self.p.tasks[t].completed
        el = max(1e-9, time.perf_counter() - self.t0)
        self.p.update(t, rate=f"{done / el * 60:.1f}/min")

    def note(self, message: str) -> None:
        self.p.console.print(message)


class PlainProgress:
    """Log lines for CI and pipes: one line per phase change, at most every ``every_s`` seconds.

    Nothing is printed before the runner first reports work: a run that fails its checks prints only
    its error.
    """

    def __init__(self, every_s: float = 10.0) -> None:
        self.totals = {p: 0 for p in PHASES}
        self.done = {p: 0 for p in PHASES}
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.every_s = every_s
        self.started = False

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *a: Any) -> None:
        if self.started:
            self._line(force=True)

    def total(self, phase: str, n: int) -> None:
        self.started = True
        self.totals[phase] += n

    def advance(self, phase: str, n: int = 1) -> None:
        self.started = True
        self.done[phase] += n
        self._line()

    def note(self, message: str) -> None:
        click.echo(message)

    def _line(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last < self.every_s:
            return
        self.last = now
        el = now - self.t0
        parts = []
        for p in PHASES:
            d, t = self.done[p], self.totals[p]
            rate = d / el * 60 if el > 0 else 0.0
            eta = f" eta {((t - d) / (d / el)):.0f}s" if d and t > d else ""
            parts.append(f"{p} {d}/{t} ({rate:.1f}/min{eta})")
        click.echo(f"[{el:7.1f}s] " + " | ".join(parts))


def _print_summary(console: Console, s: RunSummary, db: str | None) -> None:
    from ..metrics import summarize_run
    from ..store import Store

    from ..reporting.data import run_problem_flags, scored_apart

    st = Store(db, read_only=True)  # the run migrated it; another sweep's writes need not wait for this
    try:
        frame = st.results_frame(s.run_name)
        problems = st.run_problems(s.run_name)
        apart = scored_apart(run_problem_flags(st, s.run_name, frame))  # as the report scores them
        groups = summarize_run(frame, problems, n_resamples=0, exclude=apart)
        info = st.get_run(s.run_name)
    finally:
        st.close()

    def pct(e: Any) -> str:
        return "-" if e.value is None else f"{100 * e.value:.0f}%"

    def x(e: Any) -> str:  # two significant digits below 0.1x: a CPU run's 0.0017x is not "0.00x"
        return "-" if e.value is None else f"{e.value:.2f}x" if e.value >= 0.1 else f"{e.value:.2g}x"

    from ..reporting.data import protocol_changes, protocol_label

    proto = (info.protocol if info is not None else None) or {}
    label = protocol_label(str(proto.get("name", "")), protocol_changes(str(proto.get("name", "")),
                                                                         str(proto.get("precision", "fp32")), proto))
    t = Table(title=f"run {s.run_name}" + (f" ({label}, {proto.get('precision', 'fp32')})" if label else ""))
    for c in ("model", "group", "problems", "correct", "> eager", "> compile", "geomean vs eager*",
              "geomean vs compile*", "fast_1 compile"):
        t.add_column(c, justify="right" if c not in ("model", "group") else "left")
    for g in groups:
        t.add_row(g.model, g.group, str(g.problems), pct(g.correct_rate), pct(g.faster_eager_rate),
                  pct(g.faster_compile_rate), x(g.geomean_speedup_eager), x(g.geomean_speedup_compile),
                  pct(g.fast_p_compile.get("1", g.faster_compile_rate)))
    print_full(console, t)
    console.print("* geometric mean over correct candidates (KernelBench's definition)")
    if apart:
        console.print(f"[yellow]{len(apart)} problem(s) left out of the scores above, as in the report (audit: "
                      f"degenerate; or the reference failed before any candidate code ran, a problem to fix): "
                      f"{', '.join(apart[:10])}{' ...' if len(apart) > 10 else ''}[/]")
    outs = ", ".join(f"{k}: {v}" for k, v in sorted(s.outcomes.items()))
    console.print(f"outcomes this session: {outs or 'none'}; {s.skipped_done} sample(s) were already done")
    if s.unanswered:
        console.print(f"[yellow]{len(s.unanswered)} problem(s) have no sample from the model and count as not "
                      f"solved: {', '.join(s.unanswered[:10])}{' ...' if len(s.unanswered) > 10 else ''}[/]")
    console.print(f"wall time {s.wall_s:.1f} s; store {s.db_url}")
    if s.build_stats:
        b = s.build_stats
        console.print(f"builds: {b.get('built', 0)} compiled, {b.get('cached', 0)} from cache, "
                      f"{b.get('compile_error', 0)} compile errors, {b.get('compile_s', 0.0):.0f} s compiling"
                      + (f", {b['pch_used']} with a precompiled torch/extension.h" if b.get("pch_used") else "")
                      + (f", {b['private']} not self-contained (compiled by each of its candidate's processes, never "
                         "cached)" if b.get("private") else ""))
        if b.get("slot_builds"):
            console.print(f"[yellow]{b['slot_builds']} candidate(s) compiled again in the device slot: the "
                          "extension cache missed (see the log); set KBENCH_CUDA_ARCH_LIST if the pool and "
                          "the GPU disagree on the architecture[/]")
    for iss in s.problem_issues:
        console.print(f"[yellow]skipped problem[/] {iss}")
    from ..reporting import timed_on_cpu

    if info is not None and timed_on_cpu(info.hardware or {}):
        console.print("[bold yellow]timed on a CPU: the speedups above compare CPU times and do not measure GPU "
                      "kernels[/]")


# command-line parameter -> the RunConfig field it sets (for the resume check)
_RUN_FIELDS = {"model": "model", "problems": "problems", "level": "levels", "ids": "ids", "samples": "samples",
               "turns": "turns", "backend": "backend", "model_args": "params", "adapter_options": "model_options",
               "protocol": "protocol", "precision": "precision", "compile_modes": "protocol_overrides",
               "protocol_options": "protocol_overrides", "seed": "seed"}


def given_on_command_line(ctx: click.Context) -> set[str]:
    """The RunConfig fields whose options were typed on the command line (not defaults)."""
    from click.core import ParameterSource

    return {field for name, field in _RUN_FIELDS.items()
            if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)}


@click.command("run")
@click.option("-m", "--model", default="bundled", show_default=True,
              help="Model: bundled (our example solutions), replay:PATH.jsonl, cuda-agent (local vLLM/SGLang), "
                   "claude, gemini, gpt, or provider/model such as openai/gpt-5. See `kbench models list`.")
@problems_option
@level_option
@ids_option
@click.option("--samples", default=1, show_default=True, type=click.IntRange(1, 10_000),
              help="Independent samples per problem (pass@k counts them).")
@click.option("--turns", default=1, show_default=True, type=click.IntRange(1, 1000),
              help="Refinement turns per sample (feedback: compile errors, correctness, speedups).")
@click.option("--backend", default="cuda", show_default=True, type=click.Choice(["cuda", "triton"]),
              help="What the prompt asks the model to write.")
@click.option("-M", "model_args", multiple=True, metavar="KEY=VALUE",
              help="Model arguments passed to the provider, e.g. -M temperature=0.2 -M max_tokens=8192 (LLM "
                   "models only: refused for bundled, replay: and scripted:).")
@click.option("-O", "--option", "adapter_options", multiple=True, metavar="KEY=VALUE",
              help="Adapter options, e.g. -O base_url=http://host:8000/v1 -O variant=triton.")
@click.option("--protocol", default="kbench", show_default=True, type=click.Choice(PROTOCOL_NAMES),
              help="Evaluation protocol (see `kbench protocols show`).")
@click.option("--precision", default="fp32", show_default=True, type=click.Choice(PRECISIONS))
@click.option("-P", "--protocol-option", "protocol_options", multiple=True, metavar="KEY=VALUE",
              help="Change one protocol setting, e.g. -P hide_launch=true -P placements=4 (see `kbench "
                   "protocols show`); the run's protocol then has its own fingerprint and its own tables.")
@click.option("--compile-modes", default=None, metavar="MODES",
              help=f"Extra torch.compile baseline modes, comma-separated ({', '.join(COMPILE_MODES)}).")
@db_option
@click.option("--gpus", default=None, metavar="LIST",
              help="Device slots: GPU indices like 0,1 (repeat one for more slots on it: 0,0), or cpu (cpu,cpu: two "
                   "slots). Default: every visible GPU, else the CPU.")
@click.option("--slots-per-gpu", default=1, show_default=True, type=click.IntRange(1, 16), metavar="N",
              help="Device slots per device of --gpus (local executor). Slots on one GPU overlap their untimed work (process "
                   "start, build, correctness) and take turns to time; each plans for 1/N of its memory. "
                   "4-6 suit a sweep of small problems (46 level-2 problems on an H200: 2.05 s per candidate "
                   "with 6, 4.5 s with 1).")
@click.option("--quiet-host/--no-quiet-host", default=None,
              help="Pause the run's builds and torch.compile warm-ups (SIGSTOP, at most 5 s each time) while a "
                   "timing window is open. Default: on where every slot is on one GPU (two runs of 20 level-1 "
                   "candidates on an H200: speedups vs eager within a p95 of 2.2% with it, 36% without, builds "
                   "running beside the windows), off otherwise. Slows builds and warm-ups while windows are open.")
@click.option("--timing-cpus", default=None, type=click.IntRange(0, 64), metavar="N",
              help="Cores reserved for each device slot and its candidates; builds and warm-ups get the "
                   "rest (default: 2 per GPU when the host has 6 or more cores per GPU; 0 = no pinning).")
@click.option("--run-name", default=None, help="Name of the run in the store (default: generated).")
@click.option("--resume", is_flag=True,
              help="Continue the run named by --run-name where it stopped, with its stored settings, on the same kind "
                   "of machine (device, torch, CUDA: another is refused). Where its stored --problems or replay "
                   "file is not here, pass where it is now (checked against what the run stored).")
@click.option("--timeout", "timeout_s", default=300.0, show_default=True,
              type=FiniteFloatRange(0, min_open=True, hint="give seconds, e.g. --timeout 300"),
              help="Seconds a candidate may run (after its build).")
@click.option("--build-timeout", "build_timeout_s", default=900.0, show_default=True,
              type=FiniteFloatRange(0, min_open=True, hint="give seconds, e.g. --build-timeout 900"),
              help="Seconds a candidate's build may take.")
@click.option("--build-workers", default=None, type=click.IntRange(1, 256),
              help="Concurrent candidate builds (default: CPUs - 1, at most 16).")
@click.option("--warm-workers", default=None, type=click.IntRange(0, 64),
              help="Processes that compile references with torch.compile before timing starts (default: "
                   "min(8, CPUs/2) on a GPU, 0 on a CPU).")
@click.option("--seed", default=None, type=int, help="Run seed (default: secret and random, stored with the run).")
@click.option("--executor", default="local", show_default=True, type=click.Choice(["local", "ray"]))
@click.option("--ray-address", default=None, help="Ray cluster address for --executor ray (default: start one).")
@click.option("--start-method", default="zygote", show_default=True, type=click.Choice(["zygote", "spawn"]),
              help="How candidate processes start: a fork server (fast) or a fresh interpreter each.")
@click.option("--no-sandbox", is_flag=True, help="Do not confine candidate processes (debugging only).")
@click.option("--display", default="auto", show_default=True, type=click.Choice(["auto", "rich", "plain"]),
              help="Progress display; plain writes log lines (CI, pipes).")
@click.option("--report/--no-report", default=True, show_default=True,
              help="Render the HTML report under reports/<run_name>/ at the end.")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug), as `kbench -v run`.")
def run_cmd(model: str, problems: str | None, level: str | None, ids: str | None, samples: int, turns: int,
            backend: str, model_args: tuple[str, ...], adapter_options: tuple[str, ...], protocol: str,
            precision: str, protocol_options: tuple[str, ...], compile_modes: str | None, db: str | None,
            gpus: str | None, slots_per_gpu: int, quiet_host: bool | None,
            timing_cpus: int | None, run_name: str | None,
            resume: bool, timeout_s: float, build_timeout_s: float, build_workers: int | None, warm_workers: int | None, seed: int | None,
            executor: str, ray_address: str | None, start_method: str, no_sandbox: bool, display: str,
            report: bool, verbose: int = 0) -> None:
    """Generate (or replay) kernels, evaluate them against PyTorch eager and torch.compile, store everything.

    \b
    Examples:
      kbench run                                        # bundled suite, our solutions, any machine
      kbench run -m replay:gens.jsonl --problems ../KernelBench/KernelBench --level 1
      kbench run -m cuda-agent --problems ../KernelBench/KernelBench --level 1-3 --turns 4
      kbench run --run-name my-run --resume             # continue after an interruption
    """
    if verbose:  # the group's -v, given after the subcommand
        logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO if verbose == 1 else logging.DEBUG))
    gpus = parse_gpus(gpus)
    overrides: dict[str, Any] = parse_kv(protocol_options, "-P value", "placements=4")
    if compile_modes:
        modes = tuple(m.strip() for m in compile_modes.split(",") if m.strip())
        overrides["baseline_modes"] = modes
    # every argument is checked before anything is drawn: a bad one prints its error and nothing else
    get_protocol(protocol, precision, **overrides)
    if resume and not run_name:
        raise click.UsageError("--resume needs --run-name (see `kbench runs list`)")
    if executor == "ray" and (slots_per_gpu > 1 or quiet_host):  # None (the default) is not asking
        raise click.UsageError("--slots-per-gpu and --quiet-host apply to the local executor (Ray runs one actor "
                               "per GPU): drop them, or use --executor local")
    parse_id_ranges(ids)
    check_problems_source(problems)
    from ..store import normalize_db_url

    normalize_db_url(db)  # a back end or driver kbench cannot use, before anything is made (the build cache)
    cfg = RunConfig(model=model, run_name=run_name, problems=problems, levels=parse_levels(level), ids=ids,
                    samples=samples, turns=turns, backend=backend, params=parse_kv(model_args, "-M value"),
                    model_options=parse_kv(adapter_options, "-O value", "variant=triton"), protocol=protocol, precision=precision,
                    protocol_overrides=overrides, db=db, gpus=gpus, slots_per_gpu=slots_per_gpu, quiet_host=quiet_host,
                    timing_cpus=timing_cpus, timeout_s=timeout_s, build_timeout_s=build_timeout_s, build_workers=build_workers, start_method=start_method,
                    sandbox=not no_sandbox, executor=executor, ray_address=ray_address, seed=seed,
                    warm_workers=warm_workers)
    from ..adapters.base import ModelAdapter
    from ..adapters.bundled import BundledAdapter
    from ..adapters.registry import get_adapter

    checked: ModelAdapter | None = None
    if not resume:  # a resumed run takes its model from the store
        checked = get_adapter(cfg.model, options=cfg.model_options)  # unknown model, missing replay file, bad -O
        if cfg.params and not checked.takes_model_args:
            from ..errors import ConfigError

            raise ConfigError(f"-M {', '.join(sorted(cfg.params))}: model {cfg.model} takes no model arguments "
                              "(its replies do not come from a model API)",
                              fix="drop -M; it is for the LLM models: openai/<model>, anthropic/<model>, "
                                  "google/<model>, local/<name> and their aliases (cuda-agent, claude, gemini, gpt)")
        if isinstance(checked, BundledAdapter):  # the run builds its own, for the device slots' device
            checked = None
    console = Console(stderr=False)
    gpu_only = sorted(k for k in overrides if k in ("placements", "hide_launch", "hide_launch_max_ms"))
    if gpu_only:
        import torch

        if not torch.cuda.is_available():
            console.print(f"[yellow]note:[/] -P {', '.join(gpu_only)} change(s) only the GPU timer: this CPU run "
                          "times with the wall clock all the same, yet keeps its own protocol fingerprint")
    plain = display == "plain" or (display == "auto" and not sys.stdout.isatty())
    prog: Any = PlainProgress() if plain else RichProgress(console)
    explicit = frozenset(given_on_command_line(click.get_current_context()))
    with prog:
        # the run uses the adapter checked above: a second one would log its warnings (a replay file's bad
        # lines) again
        summary = asyncio.run(execute_run(cfg, progress=prog, adapter=checked, resume=resume, explicit=explicit))
    _print_summary(console, summary, db)
    if report:
        try:
            from ..reporting import render_run_report

            path = render_run_report(summary.run_name, db=db)
            console.print(f"report: {path}")
        except ImportError:
            console.print("[yellow]report rendering is not available in this install[/]")


@click.command("baseline")
@problems_option
@level_option
@ids_option
@click.option("--protocol", default="kbench", show_default=True, type=click.Choice(PROTOCOL_NAMES))
@click.option("--precision", default="fp32", show_default=True, type=click.Choice(PRECISIONS))
@click.option("-P", "--protocol-option", "protocol_options", multiple=True, metavar="KEY=VALUE",
              help="Change one protocol setting (as for `kbench run`).")
@click.option("--compile-modes", default="default", show_default=True, metavar="MODES",
              help=f"torch.compile modes to measure, comma-separated ({', '.join(COMPILE_MODES)}).")
@click.option("--force", is_flag=True, help="Measure again even when the store has a matching baseline.")
@db_option
@click.option("--gpus", default=None, metavar="LIST", help="Device slots (as for `kbench run`).")
def baseline_cmd(problems: str | None, level: str | None, ids: str | None, protocol: str, precision: str,
                 protocol_options: tuple[str, ...], compile_modes: str, force: bool, db: str | None,
                 gpus: str | None) -> None:
    """Measure eager and torch.compile baselines ahead of runs, on this machine, and cache them in the store.

    A run reuses a stored baseline only when the problem source, hardware, software versions,
    protocol timing settings and precision all match exactly.
    """
    gpus = parse_gpus(gpus)
    from ..store import normalize_db_url

    normalize_db_url(db)
    modes = tuple(m.strip() for m in compile_modes.split(",") if m.strip())
    proto = get_protocol(protocol, precision, **{**parse_kv(protocol_options, "-P value", "placements=4"), "baseline_modes": modes})
    check_problems_source(problems)
    ps = load_problems(problems, levels=parse_levels(level), ids=ids)
    console = Console()
    with PlainProgress() as prog:
        rows = asyncio.run(measure_baselines_for(list(ps.problems), protocol=proto, db=db, gpus=gpus,
                                                 modes=["eager", *[f"compile:{m}" for m in modes]],
                                                 progress=prog, force=force))
    from ..reporting.data import protocol_changes, protocol_label

    label = protocol_label(protocol, protocol_changes(protocol, precision, proto.to_dict()))
    t = Table(title=f"baselines ({label}, {precision})")
    for c in ("level", "id", "name", "mode", "ms", "cached", "error"):
        t.add_column(c)
    for r in rows:
        t.add_row(str(r["level"]), str(r["problem_id"]), r["name"], r["mode"],
                  "-" if r["value_ms"] is None else f"{r['value_ms']:.4g}", "yes" if r["cached"] else "",
                  (r["error"] or "")[:300])
    print_full(console, t)


def register(group: click.Group) -> None:
    """Add ``run`` and ``baseline`` to the ``kbench`` group."""
    group.add_command(run_cmd)
    group.add_command(baseline_cmd)
