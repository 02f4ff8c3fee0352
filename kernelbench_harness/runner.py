"""A run, end to end: problems -> model -> candidates -> build -> evaluate -> store.

:func:`execute_run` resolves a :class:`RunConfig` once (stored with the run), then drives every
sample through the agent loop concurrently: model calls (capped per adapter), builds (a CPU pool
with a content-addressed cache) and evaluations (one candidate per device slot at a time) overlap.
Every turn is written to the store in its own transaction as soon as it is judged, so a killed run
loses at most the candidates in flight, and ``resume=True`` continues where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, AsyncIterator, Protocol as TypingProtocol

from .adapters.base import ModelAdapter, SampleSpec
from .core import Candidate, EvalResult, Outcome, Problem, TimingStats
from .errors import ConfigError, StoreError
from .execution.device import EvalJob
from .execution.guards import cheat_findings, static_findings
from .problems import ProblemSet, load_problems
from .protocols import Protocol, get_protocol

__all__ = ["RunConfig", "RunSummary", "Progress", "execute_run", "default_run_name", "measure_baselines_for",
           "baseline_modes"]

log = logging.getLogger(__name__)

PHASES = ("generate", "build", "verify", "time")


class Progress(TypingProtocol):
    """What the runner reports while it works (the CLI draws it; the default does nothing)."""

    def total(self, phase: str, n: int) -> None: ...

    def advance(self, phase: str, n: int = 1) -> None: ...

    def note(self, message: str) -> None: ...


class _NullProgress:
    def total(self, phase: str, n: int) -> None:
        pass

    def advance(self, phase: str, n: int = 1) -> None:
        pass

    def note(self, message: str) -> None:
        log.info("%s", message)


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run, resolved once and stored with it.

    Attributes:
        model: adapter spec (``bundled``, ``replay:PATH``, ``cuda-agent``, ``openai/gpt-5`` ...).
        run_name: unique name in the store (generated when None).
        problems: problem source (None = bundled suite; a KernelBench folder; ``hf:...``).
        levels: levels to keep (None = all); ids: id spec like ``"1-10,15"``.
        samples: independent samples per problem (LLM adapters); turns: refinement turns per sample.
        backend: what the prompt asks for (``cuda`` or ``triton``).
        params: model arguments (``-M``); model_options: adapter options (base_url, variant...).
        protocol, precision, protocol_overrides: see :mod:`.protocols`.
        db: store URL (None = ``sqlite:///results/kbench.db``).
        gpus: device slots (None = every GPU, else CPU; ``"0,1"``; ``"cpu"``).
        slots_per_gpu: device slots per device of ``gpus`` (local executor).
        quiet_host: pause the run's builds and warm-ups while a timing window is open (local executor,
            every slot on one device; see :mod:`.execution.quiet`). None (the default): on where every slot
            is on one GPU, off otherwise and never under Ray; True on several devices is turned off with a
            warning. A resumed run takes it from the new call, not from the stored run.
        timing_cpus: cores reserved for each device slot and its candidates, the rest left to builds
            and warm-ups (None = 2 per GPU slot when the host has at least 6 cores per slot, else 0;
            0 = no pinning; see :func:`.executors.local.plan_timing_cpus`).
        timeout_s: run-time limit per candidate (s); build_timeout_s: build limit (s).
        build_workers: concurrent builds (None = min(16, CPUs)); build_cache: the extension cache folder.
        start_method: ``zygote`` or ``spawn``; sandbox: confine candidate processes.
        executor: ``local`` or ``ray``; ray_address: for ``ray``.
        seed: the run seed (None = secret random; stored with the run).
        concurrency: samples in flight (None = adapter cap + 2 per slot).
        warm_workers: processes that compile the references with torch.compile before timing starts,
            for problems without cached baselines (None = min(8, CPUs/2) on a GPU, 0 on a CPU).
    """

    model: str = "bundled"
    run_name: str | None = None
    problems: str | None = None
    levels: tuple[int, ...] | None = None
    ids: str | None = None
    samples: int = 1
    turns: int = 1
    backend: str = "cuda"
    params: dict[str, Any] = field(default_factory=dict)
    model_options: dict[str, Any] = field(default_factory=dict)
    protocol: str = "kbench"
    precision: str = "fp32"
    protocol_overrides: dict[str, Any] = field(default_factory=dict)
    db: str | None = None
    gpus: str | None = None
    slots_per_gpu: int = 1
    quiet_host: bool | None = None
    timing_cpus: int | None = None
    timeout_s: float = 300.0
    build_timeout_s: float = 900.0
    build_workers: int | None = None
    build_cache: str | None = None
    start_method: str = "zygote"
    sandbox: bool = True
    executor: str = "local"
    ray_address: str | None = None
    seed: int | None = None
    concurrency: int | None = None
    warm_workers: int | None = None

    def resolved_protocol(self) -> Protocol:
        return get_protocol(self.protocol, self.precision, **self.protocol_overrides)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["levels"] = list(self.levels) if self.levels else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        kw = {f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d}
        if kw.get("levels"):
            kw["levels"] = tuple(kw["levels"])
        return cls(**kw)


@dataclass(frozen=True)
class RunSummary:
    """What a finished (or interrupted) run did."""

    run_name: str
    db_url: str
    outcomes: dict[str, int]
    evaluated: int
    skipped_done: int
    wall_s: float
    phase_s: dict[str, float]
    problem_issues: tuple[str, ...] = ()
    status: str = "finished"
    build_stats: dict[str, Any] = field(default_factory=dict)
    warm: dict[str, Any] = field(default_factory=dict)
    #: the run's problems the model gave no sample for (a replay file without a line for them, or with a
    #: line that was skipped): they count as not solved
    unanswered: tuple[str, ...] = ()


def default_run_name(model: str, protocol: str) -> str:
    """``<model-slug>-<protocol>-<UTC timestamp>``, e.g. ``replay-generations-kbench-20261129-153012``."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", model.replace("replay:", "replay-").split("/")[-1]).strip("-").lower()
    if model.startswith("replay:"):
        slug = "replay-" + re.sub(r"[^A-Za-z0-9]+", "-", Path(model[7:]).stem).strip("-").lower()
    ts = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{slug or 'model'}-{protocol}-{ts}"


def baseline_modes(protocol: Protocol) -> list[str]:
    """Baseline mode names measured for a run: eager plus every torch.compile mode of the protocol."""
    modes = ["eager", f"compile:{protocol.compile_mode}"]
    for m in protocol.baseline_modes:
        if f"compile:{m}" not in modes:
            modes.append(f"compile:{m}")
    return modes


def extension_cache_dir(cfg: "RunConfig", *, create: bool = True) -> Path:
    """The content-addressed extension cache shared by the build pool (writer, through the trusted side)
    and every device slot (reader): ``cfg.build_cache``, ``$KBENCH_BUILD_CACHE``, or
    ``results/build_cache``; created if missing (``create=False``: only checked, so that a run refused or
    with nothing to evaluate leaves no folder behind; its closest existing folder must be writable).

    Raises:
        ConfigError: the folder cannot be created or written.
    """
    d = Path(cfg.build_cache or os.environ.get("KBENCH_BUILD_CACHE") or "results/build_cache").resolve()
    try:
        if create:
            d.mkdir(parents=True, exist_ok=True)
        probe = d
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        if not probe.is_dir():
            raise NotADirectoryError(f"{probe} is not a folder")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise PermissionError(f"no write access to {probe}")
    except OSError as e:
        raise ConfigError(f"the build cache folder {str(d)!r} cannot be used: {e.strerror or e}",
                          fix="set KBENCH_BUILD_CACHE to a folder you can write "
                              "(default: results/build_cache under the current folder)") from None
    return d


def _sqlite_file_absent(db: str) -> bool:
    """True when ``db`` is an SQLite URL whose file does not exist yet (no run can be in it)."""
    from .store.api import _sqlite_path

    try:
        path = _sqlite_path(db)
    except Exception:  # noqa: BLE001 - a malformed URL: the store's own error says so when it opens
        return False
    return path is not None and not path.exists()


def _slot_devices(cfg: RunConfig) -> list[str]:
    """The local executor's slot devices for ``cfg``: each of ``--gpus`` ``--slots-per-gpu`` times."""
    from .executors.local import resolve_devices

    return [d for d in resolve_devices(cfg.gpus) for _ in range(max(1, int(cfg.slots_per_gpu)))]


def _make_executor(cfg: RunConfig, build_cache: Path) -> Any:
    opts = {"build_cache": str(build_cache), "start_method": cfg.start_method, "sandbox": cfg.sandbox,
            "log_level": logging.getLogger().level}
    if cfg.executor == "ray":
        from .executors.ray import RayExecutor

        return RayExecutor(address=cfg.ray_address, gpus=cfg.gpus, options=opts)
    if cfg.executor != "local":
        raise ConfigError(f"unknown executor {cfg.executor!r}", fix="use --executor local or --executor ray")
    from .executors.local import LocalExecutor

    return LocalExecutor(_slot_devices(cfg), {**opts, "timing_cpus": cfg.timing_cpus, "quiet_host": cfg.quiet_host})


class _Baselines:
    """Store-backed baseline cache keyed by (problem hash, hardware, software, protocol timing, precision, mode)."""

    def __init__(self, store: Any, fingerprint: dict[str, Any], protocol: Protocol) -> None:
        self.store = store
        self.fp = fingerprint
        self.protocol = protocol
        # (problem hash, mode) -> the stats known() last returned and the timing info stored with them
        self._measured: dict[tuple[str, str], tuple[TimingStats, dict[str, Any] | None]] = {}

    def key(self, problem: Problem, mode: str) -> dict[str, str]:
        return {"problem_sha256": problem.code_sha256, "hardware_fingerprint": self.fp["hardware_fingerprint"],
                "software_fingerprint": self.fp["software_fingerprint"],
                "protocol_fingerprint": self.protocol.timing_fingerprint(), "precision": self.protocol.precision,
                "mode": mode}

    def known(self, problem: Problem, modes: list[str]) -> dict[str, TimingStats]:
        out: dict[str, TimingStats] = {}
        for m in modes:
            rec = self.store.find_baseline(**self.key(problem, m), measured_here=True)
            if rec is not None:
                out[m] = rec.stats
                meas = (rec.hardware or {}).get("measurement")
                self._measured[(problem.code_sha256, m)] = (rec.stats, meas if isinstance(meas, dict) else None)
        return out

    def info(self, problem: Problem, known: dict[str, TimingStats]) -> dict[str, Any]:
        """How each baseline of ``known`` (as :meth:`known` returned it) was measured: the timing info stored
        with that same record (``hardware["measurement"]``), by mode; modes without any are left out."""
        out: dict[str, Any] = {}
        for m, st in known.items():
            seen = self._measured.get((problem.code_sha256, m))
            if seen is not None and seen[0] is st and seen[1] is not None:
                out[m] = seen[1]
        return out

    def put(self, problem: Problem, stats: dict[str, TimingStats], info: dict[str, Any] | None = None) -> None:
        for mode, st in stats.items():
            k = self.key(problem, mode)
            if self.store.find_baseline(**k, measured_here=True) is not None:
                continue  # an imported number under the same key never stands in for a measured one
            hw = dict(self.fp)
            if info and info.get(mode):
                hw["measurement"] = info[mode]
            try:
                self.store.put_baseline(problem=problem, hardware_fingerprint=k["hardware_fingerprint"],
                                        software_fingerprint=k["software_fingerprint"],
                                        protocol_fingerprint=k["protocol_fingerprint"], precision=k["precision"],
                                        mode=mode, stats=st, hardware=hw, measured_here=True, source="measured")
            except Exception as e:  # a concurrent writer stored it first
                log.debug("baseline %s %s not stored: %s", problem.key, mode, e)


def _cheat_override(res: EvalResult, source: str) -> EvalResult:
    findings = list(res.findings) or static_findings(source)
    cheats = cheat_findings(findings)
    if cheats and res.outcome is not Outcome.CHEAT:
        return res.with_(outcome=Outcome.CHEAT, tag=cheats[0].tag, findings=tuple(findings),
                         extra={**res.extra, "underlying_outcome": str(res.outcome)})
    return res.with_(findings=tuple(findings))


#: RunConfig fields a resumed run takes from the store, whatever the command line says (but see _repoint_inputs).
STORED_RUN_FIELDS = ("model", "problems", "levels", "ids", "samples", "turns", "backend", "params",
                     "model_options", "protocol", "precision", "protocol_overrides", "seed")


def resume_differences(given: RunConfig, saved: RunConfig, explicit: frozenset[str] | set[str]) -> list[str]:
    """Settings given for a resumed run that differ from the stored ones (which win). A problem source or replay
    file that names the stored one (relative paths taken from the current folder) is no difference.

    Args:
        given: the settings of this invocation; saved: the run's stored settings.
        explicit: the fields the user set (on the command line); defaults are not differences.

    Returns:
        One ``"field=given (stored: value)"`` per differing field, in :data:`STORED_RUN_FIELDS` order.
    """
    out = []
    for f in STORED_RUN_FIELDS:
        if f in explicit and not _same_setting(f, getattr(given, f), getattr(saved, f)):
            out.append(f"{f}={getattr(given, f)!r} (stored: {getattr(saved, f)!r})")
    return out


#: RunConfig fields that name a file or folder of the run's inputs (see :func:`input_path`)
INPUT_FIELDS = ("problems", "model")
_INPUT_FLAGS = {"problems": "--problems", "model": "-m replay:"}


def input_path(field_name: str, value: Any) -> str | None:
    """The local path a run setting names, or None: ``problems`` (a folder or file; not the bundled suite nor
    ``hf:...``) and ``model`` (``replay:PATH``'s PATH)."""
    if value is None:
        return None
    v = str(value)
    if field_name == "problems":
        return None if v == "bundled" or v.startswith("hf:") else v
    if field_name == "model":
        return v[len("replay:"):] if v.startswith("replay:") and len(v) > len("replay:") else None
    return None


def _abs(path: str) -> str:
    return str(Path(path).expanduser().absolute())


def _same_setting(field_name: str, a: Any, b: Any) -> bool:
    """Whether two values of a run setting are the same; paths (:func:`input_path`) as absolute paths from here."""
    pa, pb = input_path(field_name, a), input_path(field_name, b)
    if pa is not None and pb is not None:
        return _abs(pa) == _abs(pb)
    return bool(a == b)


def absolute_inputs(cfg: RunConfig) -> RunConfig:
    """``cfg`` with its problem source and replay file (:func:`input_path`) as absolute paths: what a new run
    stores, so that ``--resume`` finds them from any folder."""
    p, m = input_path("problems", cfg.problems), input_path("model", cfg.model)
    return dataclasses.replace(cfg, problems=_abs(p) if p is not None else cfg.problems,
                               model=f"replay:{_abs(m)}" if m is not None else cfg.model)


def _where_flag(field_name: str, stored: str) -> str:
    """The flag that points a resumed run at its input ``field_name`` (stored as ``stored``) where it is now."""
    return "--problems <folder>" if field_name == "problems" else f"-m replay:<folder>/{Path(stored).name}"


def _repoint_inputs(given: RunConfig, saved: RunConfig, explicit: frozenset[str] | set[str]) -> dict[str, Any]:
    """The inputs a resumed run takes from the command line: a ``--problems`` or ``-m replay:`` path given where
    the stored one does not exist here (a run stored with relative paths, resumed from another folder). Whether
    the new one holds the same problems and generations is checked once they are loaded
    (:func:`_check_repointed_problems`, :func:`_check_repointed_replay`).

    Returns:
        ``{field: the given value}`` for each re-pointed field.

    Raises:
        ConfigError: a path given that does not exist; a replay file re-pointed to a file of another name (its
            stem names the model of lines without one).
    """
    out: dict[str, Any] = {}
    for f in INPUT_FIELDS:
        old, new = input_path(f, getattr(saved, f)), input_path(f, getattr(given, f))
        if f not in explicit or old is None or new is None or Path(old).expanduser().exists():
            continue  # the stored setting is used (and a different one given is named as ignored)
        flag = _where_flag(f, old)
        if not Path(new).expanduser().exists():
            raise ConfigError(f"{_INPUT_FLAGS[f]}{'' if f == 'model' else ' '}{new}: no such file or folder",
                              fix=f"pass {flag} where the run's {'problems are' if f == 'problems' else 'file is'} "
                                  "now")
        if f == "model" and Path(new).name != Path(old).name:
            raise ConfigError(f"-m {given.model}: the run's replay file is {saved.model} (not here); a resume "
                              "may take the same file from another folder, not another file",
                              fix=f"pass {flag}, the run's file where it is now; or start a new run (another "
                                  "--run-name) for another file")
        out[f] = getattr(absolute_inputs(given), f)
    return out


def _check_inputs_here(cfg: RunConfig, run_name: str, *, problems: bool, model: bool) -> None:
    """Refuse a resumed run whose stored problem source or replay file (``problems``/``model``: check it) is not
    here, before anything starts, saying how to point at them.

    Raises:
        ConfigError: a stored input path does not exist (relative paths from the current folder).
    """
    missing = [(f, p) for f, p, ask in (("problems", input_path("problems", cfg.problems), problems),
                                         ("model", input_path("model", cfg.model), model))
               if ask and p is not None and not Path(p).expanduser().exists()]
    if not missing:
        return
    named = " and ".join(f"{_INPUT_FLAGS[f]}{'' if f == 'model' else ' '}{p}" for f, p in missing)
    here = ", ".join(_abs(p) for _, p in missing)
    flags = " ".join(_where_flag(f, p) for f, p in missing)
    raise ConfigError(f"run {run_name!r} was started with {named}, which {'is' if len(missing) == 1 else 'are'} "
                      f"not here ({here})",
                      fix=f"pass {flags} where {'it is' if len(missing) == 1 else 'they are'} now (a resume checks "
                          "them against what the run stored), or resume from the folder the run was started in")


def _check_repointed_problems(run_name: str, source: str, problems: list[Problem], scope: list[Problem]) -> None:
    """Refuse a re-pointed problem source that lacks some of the run's problems (compared by their code's hash).

    Raises:
        ConfigError: a problem of the run (``scope``) is not among ``problems`` (loaded from ``source``).
    """
    have = {p.code_sha256 for p in problems}
    lacking = [p.key for p in scope if p.code_sha256 not in have]
    if lacking:
        raise ConfigError(f"--problems {source} does not hold {len(lacking)} of the {len(scope)} problem(s) of run "
                          f"{run_name!r} (same level, id and code): {', '.join(lacking[:10])}"
                          + (" ..." if len(lacking) > 10 else ""),
                          fix="pass the folder of the problems the run was started with, or start a new run "
                              "(another --run-name) for these problems")


def _check_repointed_replay(run_name: str, ad: ModelAdapter, store: Any) -> None:
    """Refuse a re-pointed replay file that does not serve, for every candidate the run stored, the same code under
    the same level, problem, model and sample.

    Raises:
        ConfigError: a stored candidate's sample is missing from the file, or has other code there.
    """
    from .adapters.replay import ReplayAdapter

    if not isinstance(ad, ReplayAdapter):
        return
    index = {(g.level, g.problem_id, g.model, g.sample_id): g.code for g in ad.generations}
    other = [f"L{a.level}/{a.problem_id} {a.model} sample {a.sample_id}" for a in store.attempts(run_name)
             if a.turn == 0 and a.code is not None
             and index.get((a.level, a.problem_id, a.model, a.sample_id)) != a.code]
    if other:
        raise ConfigError(f"{ad.name} does not hold the code run {run_name!r} stored for {len(other)} candidate(s): "
                          f"{', '.join(other[:10])}" + (" ..." if len(other) > 10 else ""),
                          fix="pass the replay file the run was started with, or start a new run (another "
                              "--run-name) for this file")


def _describe_machine(fp: dict[str, Any]) -> str:
    """``"NVIDIA H200, torch 2.11.0+cu130, CUDA 13.0"``: a hardware record's device and stack."""
    return (f"{fp.get('device_name') or fp.get('device_type') or 'an unknown device'}, torch {fp.get('torch')}, "
            + (f"CUDA {fp['cuda']}" if fp.get("cuda") else "no CUDA"))


def _refuse_other_hardware(run_name: str, run_hw: dict[str, Any], here: dict[str, Any], *, planned: bool) -> None:
    """Refuse to resume a run on a machine whose device or stack differs from the one its results were timed on
    (:func:`.hardware.fingerprint_differences`): its times would be mixed with the run's, under one hardware record.

    Raises:
        ConfigError: a field of :data:`.hardware.RESUME_FIELDS` differs.
    """
    from .hardware import fingerprint_differences

    diff = fingerprint_differences(run_hw, here, planned=planned)
    if diff:
        raise ConfigError(f"run {run_name!r} was timed on {_describe_machine(run_hw)}; this machine differs "
                          f"({'; '.join(diff)}), and its times would be mixed with the run's under one record",
                          fix="resume it on the same kind of machine, with the same torch and CUDA; or evaluate "
                              "here under a new --run-name")


def _resumed_part(fp: dict[str, Any]) -> dict[str, Any]:
    """A resumed part's entry in its run's ``hardware["resumed"]``: the machine it ran on (the run's record keeps
    the machine it was started on)."""
    part = {k: fp.get(k) for k in ("host", "device", "device_name", "driver", "python", "host_probe_ms",
                                   "hardware_fingerprint", "software_fingerprint")}
    part["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # UTC
    return part


def _check_environment() -> None:
    """Refuse bad kbench environment variables before anything is stored: read later in each device
    slot, a bad value would fail every candidate and be stored as their runtime errors.

    Raises:
        ConfigError: ``KBENCH_REF_BUDGET_BYTES`` is not a non-negative integer; ``KBENCH_DEVSHARE``,
            ``KBENCH_MEMORY_LEDGER``, ``KBENCH_PCH``, ``KBENCH_SLIM_HEADERS``, ``KBENCH_START_OFF_HOLD``,
            ``KBENCH_COMPILE_OFF_HOLD``, ``KBENCH_LANE_PRIORITY`` or ``KBENCH_LANE_EXCLUSIVE`` is not an on/off switch;
            ``KBENCH_SANDBOX_LAYERS`` names an unknown layer; ``KBENCH_SANDBOX_WRITE_DIRS`` names something other
            than an existing folder by absolute path.
    """
    import torch

    from .execution import devshare
    from .execution.device import (COMPILE_OFF_HOLD_ENV, LANE_EXCLUSIVE_ENV, LANE_PRIORITY_ENV, START_OFF_HOLD_ENV,
                                   ProblemContext, compile_off_hold_enabled, lane_exclusive_enabled,
                                   lane_priority_enabled, start_off_hold_enabled)

    try:
        devshare.enabled()
    except ValueError as e:
        raise ConfigError(str(e), fix=f"set {devshare.ENV}=0 to pass inputs through files, or unset it") from None

    from .execution import build, memledger, sandbox

    for check, fix in ((memledger.enabled, f"set {memledger.ENV}=0 or 1, or unset it (1)"),
                       (build.pch_enabled, "set KBENCH_PCH=0 (no precompiled headers) or 1, or unset it (1)"),
                       (build.slim_headers_enabled, "set KBENCH_SLIM_HEADERS=0 or 1, or unset it (1)"),
                       (start_off_hold_enabled, f"set {START_OFF_HOLD_ENV}=0 or 1, or unset it (0)"),
                       (compile_off_hold_enabled, f"set {COMPILE_OFF_HOLD_ENV}=0 or 1, or unset it (1)"),
                       (lane_priority_enabled, f"set {LANE_PRIORITY_ENV}=0 or 1, or unset it (1)"),
                       (lane_exclusive_enabled, f"set {LANE_EXCLUSIVE_ENV}=0 or 1, or unset it (0)"),
                       (sandbox.pinned_layers, "name the layers to try first from netns, landlock, caps, seccomp "
                                               "(e.g. KBENCH_SANDBOX_LAYERS=netns,caps), or unset it"),
                       (sandbox.site_write_dirs, "name existing folders by absolute path, comma-separated "
                                                 "(/proc/self for the process's own /proc entry), or unset it")):
        try:
            check()
        except ValueError as e:
            raise ConfigError(str(e), fix=fix) from None

    try:
        ProblemContext.reference_budget_bytes(torch.device("cpu"))  # reads and checks the variable
    except ValueError as e:
        raise ConfigError(str(e), fix=f"set {ProblemContext.REF_BUDGET_ENV} to a number of bytes "
                          "(e.g. 16000000000) or unset it (10% of the GPU's memory)") from None


def _process_age_s() -> float | None:
    """Seconds since this process started (Linux ``/proc``; None elsewhere): interpreter start, imports
    and loading problems, before a run's executor starts."""
    from .execution.quiet import proc_stat

    fields = proc_stat("self")
    try:
        start_ticks = int(fields[19])  # type: ignore[index]
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return round(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError, TypeError):
        return None


async def execute_run(cfg: RunConfig, *, progress: Progress | None = None,
                      problem_set: ProblemSet | None = None, adapter: ModelAdapter | None = None,
                      resume: bool = False, explicit: frozenset[str] = frozenset()) -> RunSummary:
    """Run (or resume) an evaluation.

    Args:
        cfg: the run's settings. With ``resume=True`` and an existing ``cfg.run_name``, the stored
            settings are used instead (the CLI warns about differences).
        progress: receives per-phase totals and advances.
        problem_set, adapter: pre-built objects (tests); otherwise built from ``cfg``.
        resume: continue an existing run instead of refusing its name.
        explicit: the ``cfg`` fields the user set; on resume, those that differ from the stored
            settings are named in a progress note (the stored ones are used), except a problem source or replay
            file given where the stored path is not here, which is used (:func:`_repoint_inputs`).

    Returns:
        A :class:`RunSummary`.

    Raises:
        StoreError: the run name exists and ``resume`` is False, or does not exist and ``resume`` is True.
        PrerequisiteError: the adapter cannot work (key, extra, server) or no device.
        ConfigError: bad settings; on resume, a machine unlike the one the run was started on
            (:data:`.hardware.RESUME_FIELDS`: refused before the device workers start where this process can
            tell, else once they report, before anything is evaluated), a stored input path that is not here, or
            one re-pointed to other problems or generations (:func:`_repoint_inputs`).
    """
    from .adapters.registry import get_adapter
    from .agent import TurnRecord, run_sample
    from .execution.build import target_arch_list, with_no_gpu_hint
    from .execution.builder import BuildPool, needs_build
    from .store import Store
    from .store.liveness import Heartbeat

    from .execution.sandbox import make_undumpable

    make_undumpable()  # this process holds API keys: keep candidates out of /proc/<pid>/environ
    age_at_run = _process_age_s()  # the interpreter's start and the imports up to here
    t_run = time.perf_counter()
    _check_environment()
    prog: Progress = progress or _NullProgress()

    def open_store(c: RunConfig) -> tuple[Any, Any]:
        st = Store(c.db)
        try:
            found = st.get_run(c.run_name) if c.run_name else None
            if found is not None and not resume:
                raise StoreError(f"a run named {c.run_name!r} already exists in {st.safe_url}",
                                 fix="pass --resume to continue it, or choose another --run-name")
            if found is None and resume:
                raise StoreError(f"no run named {c.run_name!r} to resume in {st.safe_url}",
                                 fix="check `kbench runs list`, or drop --resume to start a new run")
            if found is not None:  # refused while its runner still runs (claimed below, once there is work)
                st.claim_run(found.run_name, check_only=True)
        except BaseException:
            st.close()
            raise
        return st, found

    # A new run checks its problems and model before the store is opened, so bad input creates no
    # database file; a resumed run needs the store first (its settings are stored there).
    store, stored = open_store(cfg) if resume else (None, None)
    heartbeat: Heartbeat | None = None  # this process's heartbeat for the run, from when it runs it
    try:
        repointed: dict[str, Any] = {}  # inputs a resumed run takes from the command line (_repoint_inputs)
        if stored is not None:
            saved = RunConfig.from_dict(stored.config.get("run_config", {}))
            repointed = _repoint_inputs(cfg, saved, explicit)
            ignored = resume_differences(cfg, saved, explicit - set(repointed))
            if ignored:
                prog.note(f"--resume continues run {cfg.run_name!r} with its stored settings; ignored: "
                          f"{'; '.join(ignored)}")
            if repointed:
                prog.note(f"--resume of run {cfg.run_name!r} reads its inputs where they are now (the stored paths "
                          "are not here): " + "; ".join(f"{f}={v} (stored: {getattr(saved, f)})"
                                                        for f, v in repointed.items()))
            # the stored settings win; device, db and process settings may change between sessions
            cfg = dataclasses.replace(saved, db=cfg.db, gpus=cfg.gpus, slots_per_gpu=cfg.slots_per_gpu,
                                      timing_cpus=cfg.timing_cpus, quiet_host=cfg.quiet_host,
                                      start_method=cfg.start_method,
                                      build_workers=cfg.build_workers, executor=cfg.executor,
                                      ray_address=cfg.ray_address, concurrency=cfg.concurrency,
                                      warm_workers=cfg.warm_workers, timeout_s=cfg.timeout_s,
                                      build_cache=cfg.build_cache or saved.build_cache, **repointed)
            if cfg.executor == "local":  # a machine unlike the run's is refused before any device worker starts
                from .executors.local import resolve_devices
                from .hardware import planned_fingerprint

                _refuse_other_hardware(cfg.run_name or "", stored.hardware or {},
                                       planned_fingerprint(resolve_devices(cfg.gpus)), planned=True)
            _check_inputs_here(cfg, cfg.run_name or "", problems=problem_set is None, model=adapter is None)
        generated_name = not cfg.run_name
        run_name = cfg.run_name or default_run_name(cfg.model, cfg.protocol)
        protocol = cfg.resolved_protocol()
        seed = cfg.seed if cfg.seed is not None else (int(stored.config.get("run_seed")) if stored else secrets.randbits(31))
        cfg = dataclasses.replace(cfg, run_name=run_name, seed=seed)

        ps = problem_set or load_problems(cfg.problems, levels=cfg.levels, ids=cfg.ids)
        if not ps.problems:
            have = ""
            if problem_set is None and (cfg.levels or cfg.ids):
                try:  # say what the source does hold (an error path: one more load is fine)
                    every = load_problems(cfg.problems)
                    lv = sorted({p.level for p in every.problems})
                    have = f"; it holds {len(every.problems)} problem(s) in level(s) {', '.join(map(str, lv)) or 'none'}"
                except Exception:  # noqa: BLE001 - the message goes out without it
                    have = ""
            raise ConfigError(f"no problems selected from {ps.source}{have}",
                              fix="check --problems, --level and --ids (`kbench problems list` shows what loads)")
        if stored is not None:
            run_problems = store.run_problems(run_name)
            if "problems" in repointed:
                _check_repointed_problems(run_name, str(cfg.problems), list(ps.problems), run_problems)
            scope = {p.code_sha256 for p in run_problems}
            problems = [p for p in ps.problems if p.code_sha256 in scope]
            if len(problems) < len(scope):
                prog.note(f"{len(scope) - len(problems)} problem(s) of the stored run are no longer in the source")
        else:
            problems = list(ps.problems)
        ad = adapter or get_adapter(cfg.model, options=cfg.model_options)
        if "model" in repointed:
            _check_repointed_replay(run_name, ad, store)
        ad.check_ready()
        plan_dev: str | None = None  # the slots' device type where it is known before they start
        if cfg.executor == "local":
            from .executors.local import resolve_devices

            devices = resolve_devices(cfg.gpus)  # no such GPU: an error before the store exists
            plan_dev = "cuda" if any(d.startswith("cuda") for d in devices) else "cpu"
        # one folder of prebuilt extensions, written by the build pool and read by every device slot (an
        # unusable one is an error before the store exists)
        build_cache = extension_cache_dir(cfg, create=False)

        def plan(ad: ModelAdapter) -> tuple[tuple[str, ...], dict[tuple[int, int, str, int], int],
                                            list[tuple[SampleSpec, int]], int]:
            """The samples to evaluate: (unanswered problems, replace_from, todo, samples already done)."""
            return _plan_samples(ad, problems, cfg, ps.source, store, run_name if stored is not None else None, prog)

        # the bundled adapter plans for the slots' device (its CUDA solutions on a GPU only)
        device_planned = adapter is None and "device" not in cfg.model_options and cfg.model == "bundled"
        planned_early = plan_dev is not None or not device_planned
        if planned_early:  # what there is to evaluate is known before any device worker starts
            if device_planned:
                ad = get_adapter(cfg.model, options={**cfg.model_options, "device": plan_dev})
            unanswered, replace_from, todo, skipped = plan(ad)
            if stored is not None and not todo:
                finish = stored.status != "finished"
                prog.note(f"nothing to evaluate: the {skipped} sample(s) of run {run_name} are complete"
                          + ("; it is marked finished" if finish else ""))
                if finish:
                    store.claim_run(run_name)  # refused if another runner took it meanwhile
                    store.set_run_status(run_name, "finished")
                store.close()
                return RunSummary(run_name=run_name, db_url=store.safe_url, outcomes={}, evaluated=0,
                                  skipped_done=skipped, wall_s=time.perf_counter() - t_run, phase_s={},
                                  problem_issues=tuple(f"{i.path}: {i.reason}" for i in ps.issues),
                                  unanswered=unanswered)
        if store is None and (planned_early or not _sqlite_file_absent(cfg.db)):
            # a new run opens (and may create) the store once it has something to evaluate; one planned after the
            # device workers start (bundled on Ray) opens it now only where it exists (a name taken is an error
            # before they start), else after the plan
            store, stored = open_store(cfg)
        extension_cache_dir(cfg)  # created now: there is something to evaluate (or the plan follows the start)
        if stored is not None:  # this process runs it now: a second --resume is refused until it ends
            store.claim_run(run_name)
            heartbeat = Heartbeat(store, run_name)
    except BaseException:
        if store is not None:
            store.close()
        raise

    t_exec0 = time.perf_counter()
    # (process_to_executor: the process's age here; to_run of it, before run() was entered; the rest: the
    # environment's checks, the problems, the adapter and the store)
    startup_s = {"process_to_executor": _process_age_s(), "to_run": age_at_run,
                 "run_to_executor": round(time.perf_counter() - t_run, 3)}
    sizing = _start_sizing(cfg, problems, build_cache)  # beside the slots' start-up
    # (seconds of silence otherwise: each slot imports torch and sets its device up before the first result)
    prog.note(f"starting the device worker(s) for {len(problems)} problem(s)")
    try:
        executor = _make_executor(cfg, build_cache)
    except BaseException:
        if sizing is not None:
            sizing.stop()
        if heartbeat is not None:
            heartbeat.stop()
            with contextlib.suppress(Exception):
                store.set_run_status(run_name, "interrupted", if_runner=True)
        if store is not None:
            store.close()
        raise
    pool: BuildPool | None = None
    status = "interrupted"
    # the torch.compile warm-up's per-problem record, filled as each problem's compile ends (kept when the run
    # is cut short, too: see _warm_record)
    warm_info: dict[str, Any] = {}
    warm_t0: list[float] = []
    fp: dict[str, Any] = {}
    n_eval = 0  # candidates evaluated by this part
    try:
        fp = executor.fingerprint()
        startup_s["executor"] = round(time.perf_counter() - t_exec0, 3)  # device slots started, sandbox probed
        if stored is not None:  # what the slots report, before anything is evaluated (a GPU's model; Ray's slots)
            _refuse_other_hardware(run_name, stored.hardware or {}, fp, planned=False)
        devtype = "cuda" if str(fp.get("device_type")) == "cuda" else "cpu"
        if not planned_early or (device_planned and devtype != plan_dev):
            if device_planned:
                ad = get_adapter(cfg.model, options={**cfg.model_options, "device": devtype})
            unanswered, replace_from, todo, skipped = plan(ad)
        if store is None:  # planned after the device workers started (plan raised if there was nothing to do)
            store, stored = open_store(cfg)
        if stored is None:
            store.create_run(run_name, model=cfg.model, protocol=protocol.to_dict(),
                             config={"run_config": absolute_inputs(cfg).to_dict(), "run_seed": seed,
                                     "problems_source": ps.source,
                                     "startup_s": startup_s,
                                     "problem_issues": [f"{i.path}: {i.reason}" for i in ps.issues]},
                             hardware=fp, problems=problems)
            heartbeat = Heartbeat(store, run_name)
        if generated_name:  # say it while the run can still be cut
            prog.note(f"run {run_name}; if it stops, continue it with: {resume_command(run_name, cfg.db)}")
        if skipped:
            prog.note(f"resuming {run_name}: {skipped} sample(s) already complete")
        total_turns = cfg.turns if ad.is_llm else 1
        baselines = _Baselines(store, fp, protocol)
        modes = baseline_modes(protocol)
        arch = target_arch_list(fp.get("compute_capability"))
        from .execution.warm import available_cpus

        ncpu = available_cpus()  # the cores left to this process once the device slots took theirs (plan_timing_cpus)
        pool = BuildPool(build_cache, workers=cfg.build_workers or min(16, max(1, ncpu - 1)),
                         arch_list=arch, timeout_s=cfg.build_timeout_s, start_method=cfg.start_method,
                         sandbox=cfg.sandbox)
        prog.total("generate", len(todo) * total_turns if ad.is_llm else len(todo))
        prog.total("build", 0)
        prog.total("verify", len(todo) * total_turns)
        prog.total("time", 0)

        outcomes: dict[str, int] = {}
        phase_s = {k: 0.0 for k in ("generate", "build", "evaluate")}

        first_eval: dict[str, asyncio.Event] = {}  # set once a problem's first candidate was evaluated

        async def evaluate(c: Candidate) -> EvalResult:
            problem = by_key[(c.level, c.problem_id)]
            if needs_build(c.source):
                prog.total("build", 1)
                t0 = time.perf_counter()
                bo = await pool.build(c)  # type: ignore[union-attr]
                phase_s["build"] += time.perf_counter() - t0
                prog.advance("build")
                if bo.status in ("compile_error", "timeout"):
                    outcome = Outcome.COMPILE_ERROR if bo.status == "compile_error" else Outcome.TIMEOUT
                    err = with_no_gpu_hint(bo.error or "", devtype)
                    return _cheat_override(EvalResult(outcome, compiled=False, error=err,
                                                      phase_s={"build": bo.seconds},
                                                      extra={"phase": "build", "build_pool": dataclasses.asdict(bo)}),
                                           c.source)
            # wait for this problem's torch.compile warm-up only (others may still be compiling)
            await warm_gate.wait()
            ev = warm_events.get(problem.key)
            if ev is not None:
                await ev.wait()
            known = baselines.known(problem, modes)
            if len(known) < len(modes):
                # the first candidate of a problem measures its baselines alone: the others (on other
                # slots) wait for it once, so candidates of a problem in a run are compared with the same
                # eager and torch.compile times and nothing is timed twice. Once it is done, whatever
                # its outcome (a failed candidate measures nothing), the rest go ahead together.
                gate = first_eval.get(problem.key)
                if gate is None:
                    first_eval[problem.key] = gate = asyncio.Event()
                    try:
                        return _after(problem, c, await _evaluate_job(problem, c, known))
                    finally:
                        gate.set()
                await gate.wait()
                known = baselines.known(problem, modes)
            return _after(problem, c, await _evaluate_job(problem, c, known))

        async def _evaluate_job(problem: Problem, c: Candidate, known: dict[str, TimingStats]) -> EvalResult:
            res = await _evaluate_once(problem, c, known)
            if pool is not None and needs_build(c.source):
                # a prebuilt binary it loaded changed since the pool stored it (another candidate wrote
                # into the cache): evaluate again, the slot compiling it afresh
                changed = pool.changed_cache_entries((res.extra.get("build") or {}).get("cache_hits"))
                if changed:
                    res = await _evaluate_once(problem, c, known)
                    res.extra["cache_tampered"] = changed
            return res

        async def _evaluate_once(problem: Problem, c: Candidate, known: dict[str, TimingStats]) -> EvalResult:
            nonlocal n_eval
            job = EvalJob(problem=problem, candidate=c, protocol=protocol, run_seed=seed, baselines=known,
                          baseline_info=baselines.info(problem, known),
                          timeout_s=cfg.timeout_s, build_timeout_s=cfg.build_timeout_s, large=problem.key in lane)
            t0 = time.perf_counter()
            res = await executor.evaluate(job)
            phase_s["evaluate"] += time.perf_counter() - t0
            n_eval += 1
            got = {m: TimingStats.from_dict(s) for m, s in (res.extra.get("baselines") or {}).items()}
            if got:
                baselines.put(problem, {m: s for m, s in got.items() if s is not None},
                              res.extra.get("baseline_info"))
            return res

        def _after(problem: Problem, c: Candidate, res: EvalResult) -> EvalResult:
            raw = (res.extra.get("build") or {}).get("built")
            slot_built = [b for b in raw if isinstance(b, dict) and not b.get("private")] if isinstance(raw, list) else []
            if needs_build(c.source) and slot_built:
                # the pool built (or found) this candidate's extensions, yet the slot compiled again:
                # the cache keys differ between the two (a different arch list, compiler flags...). Private
                # extensions (not self-contained: build.shared_build_args) are never cached: each slot compiles them
                pool.stats["slot_builds"] = pool.stats.get("slot_builds", 0) + 1  # type: ignore[union-attr]
                if pool.stats["slot_builds"] == 1:  # type: ignore[union-attr]
                    log.warning("a device slot compiled an extension that the build pool had built: the "
                                "extension cache missed (%s)", ", ".join(str(b.get("name", "")) for b in slot_built))
            if res.candidate is not None:
                prog.total("time", 1)
                prog.advance("time")
            return res

        async def record(rec: TurnRecord) -> None:
            gen = dataclasses.asdict(rec.generation)
            key = (rec.spec.problem.level, rec.spec.problem.problem_id, rec.spec.model, rec.spec.sample_id)
            store.record_attempt(run_name, problem=rec.spec.problem, candidate=rec.candidate, model=rec.spec.model,
                                 sample_id=rec.spec.sample_id, turn=rec.turn, messages=list(rec.messages) or None,
                                 reply=rec.generation.text if ad.is_llm else None, generation=gen,
                                 result=rec.result,
                                 # evaluated again on resume: replaces the stored turns from this one on
                                 replace_from_turn=rec.turn if replace_from.get(key) == rec.turn else None)
            outcomes[str(rec.result.outcome)] = outcomes.get(str(rec.result.outcome), 0) + 1
            if ad.is_llm:
                prog.advance("generate")
            elif rec.result.outcome is not Outcome.GENERATION_ERROR:
                prog.advance("generate")
            prog.advance("verify")

        by_key = {(p.level, p.problem_id): p for p in problems}
        warm_gate = asyncio.Event()  # set once the problems being warmed are known
        warm_events: dict[str, asyncio.Event] = {}

        async def warm() -> None:
            from .execution.warm import warm_compile

            try:
                dev0 = executor.slots[0]["device"] if executor.slots else "cpu"
                gpu = dev0.startswith("cuda")
                workers = cfg.warm_workers if cfg.warm_workers is not None else (min(8, max(1, ncpu // 2)) if gpu else 0)
                # in the order the problems are evaluated (each problem's timing waits for its own compile)
                first_at: dict[tuple[int, int], int] = {}
                for i, (s, _) in enumerate(todo):
                    first_at.setdefault((s.problem.level, s.problem.problem_id), i)
                cold = sorted((p for p in problems if (p.level, p.problem_id) in first_at
                               and len(baselines.known(p, modes)) < len(modes)),
                              key=lambda p: first_at[(p.level, p.problem_id)])
                if cold and workers > 0 and cfg.executor == "local":
                    workers = min(workers, len(cold))  # as warm_compile does: a process per problem at most
                    prog.note(f"compiling {len(cold)} reference(s) with torch.compile in {workers} process(es); "
                              "each problem's timing starts when its own compile is done")
                    loop = asyncio.get_running_loop()
                    for p in cold:
                        warm_events[p.key] = asyncio.Event()
                    warm_gate.set()

                    def done(key: str) -> None:
                        ev = warm_events.get(key)
                        if ev is not None:
                            loop.call_soon_threadsafe(ev.set)

                    warm_t0.append(time.perf_counter())
                    await asyncio.to_thread(
                        warm_compile, cold, precision=protocol.precision,
                        modes=[m.split(":", 1)[1] for m in modes if m.startswith("compile:")],
                        no_grad=protocol.reference_no_grad, tf32=protocol.tf32,
                        device_index=dev0.split(":", 1)[1] if gpu else None,
                        workers=workers, on_done=done, results=warm_info)
                    phase_s["warm"] = time.perf_counter() - warm_t0[0]
            finally:
                warm_gate.set()
                for ev in warm_events.values():
                    ev.set()

        # problems in order, so each slot's cached references are reused by consecutive candidates
        todo.sort(key=lambda x: (x[0].problem.level, x[0].problem.problem_id, x[0].model, x[0].sample_id))
        lane: set[str] = set()  # the large problems, run one per GPU at a time (EvalJob.large)
        if _slots_share_a_gpu(executor.slots or []):
            # several slots on one GPU share its memory (the ledger): large problems spread among small ones
            todo, lane = _interleave_todo(todo, phase_s, sizing)
        warm_task = asyncio.create_task(warm())
        slots = len(executor.slots)
        limit = cfg.concurrency or max(4, min(getattr(ad, "max_concurrency", 8), 64) + 2 * slots +
                                       (pool.workers if pool else 0))
        gate = SampleGate(limit, lane, lane_gpus=_shared_gpus(executor.slots or []))

        async def one(spec: SampleSpec, start_turn: int) -> None:
            async with gate(spec.problem.key):
                history: list[TurnRecord] = []
                if start_turn:
                    for a in store.attempts_for_sample(run_name, spec.problem.level, spec.problem.problem_id,
                                                       spec.model, spec.sample_id):
                        from .adapters.base import Generation

                        gfields = {f.name for f in dataclasses.fields(Generation)}
                        gen = Generation(**{k: v for k, v in (a.generation or {}).items() if k in gfields})
                        cand = Candidate(spec.problem.level, spec.problem.problem_id, a.code or "",
                                         sample_id=spec.sample_id, turn=a.turn, model=spec.model) if a.code else None
                        history.append(TurnRecord(spec, a.turn, tuple(a.messages or ()), gen, cand, a.result))
                    history = history[:start_turn]
                t0 = time.perf_counter()
                await run_sample(ad, spec, turns=total_turns, backend=cfg.backend, params=dict(cfg.params),
                                 evaluate=evaluate, record=record, start_turn=len(history), history=history)
                phase_s["generate"] += 0.0 if not ad.is_llm else time.perf_counter() - t0

        await asyncio.gather(*(one(s, st) for s, st in todo))
        await warm_task
        status = "finished"
        # a resumed run keeps the record of the machine it was started on (the same kind: _refuse_other_hardware)
        # and adds this part's machine to its "resumed" list
        end_fp = dict(stored.hardware) if stored is not None and stored.hardware else dict(fp)
        try:
            from .hardware import read_gpu_clocks

            clocks = read_gpu_clocks()
        except Exception:
            clocks = None
        if stored is not None and stored.hardware:
            end_fp["resumed"] = [*(end_fp.get("resumed") or []), {**_resumed_part(fp), "clocks_end": clocks}]
        elif clocks is not None:
            end_fp["clocks_end"] = clocks
        if warm_info:
            # the torch.compile warm-up: per problem its modes' seconds, and (GPU) its waits for the device
            # lock and the epochs of its GPU work, to check against the timing windows' epochs
            end_fp["warm"] = _warm_record(stored, warm_info, warm_t0)
        elif stored is not None and (stored.hardware or {}).get("warm"):
            end_fp["warm"] = stored.hardware["warm"]  # an earlier part's, which this part had nothing to add to
        store.set_run_status(run_name, status, hardware=end_fp, if_runner=True)
        return RunSummary(run_name=run_name, db_url=store.safe_url, outcomes=outcomes, evaluated=n_eval,
                          skipped_done=skipped, wall_s=time.perf_counter() - t_run, phase_s=phase_s,
                          problem_issues=tuple(f"{i.path}: {i.reason}" for i in ps.issues), status=status,
                          build_stats=dict(pool.stats) if pool else {}, warm=warm_info, unanswered=unanswered)
    except BaseException:
        try:
            cut = store.get_run(run_name) if store is not None else None
            if cut is not None:
                INTERRUPTED.append((run_name, cfg.db))  # for the CLI's "continue it with" line
                hw = None
                if warm_info:  # the compiles that finished before the cut, which a resumed run does not redo
                    hw = {**(cut.hardware or {}), "warm": _warm_record(stored, dict(warm_info), warm_t0)}
                if stored is not None and stored.hardware and n_eval:  # this part timed candidates here
                    hw = hw or dict(cut.hardware or {})
                    hw["resumed"] = [*(hw.get("resumed") or []), _resumed_part(fp)]
                store.set_run_status(run_name, "interrupted", hardware=hw, if_runner=True)
        except Exception:
            pass
        raise
    finally:
        try:
            if sizing is not None:
                try:
                    sizing.stop()
                except Exception:  # noqa: BLE001 - the build pool and the slots are closed whatever happens
                    log.warning("stopping the sizing child failed", exc_info=True)
            if pool is not None:
                pool.close()
        finally:
            try:
                await executor.close()
            finally:
                if heartbeat is not None:
                    heartbeat.stop()
                if store is not None:  # (None: a run planned after the start that stopped before it opened one)
                    store.close()


class SampleGate:
    """The places a run's samples take in flight (generation, build, evaluation): at most ``limit`` at once, and
    of them at most :attr:`lane_limit` of the large problems (``lane``: keys of problems run one per GPU at a
    time, ``EvalJob.large``). Places go to waiting samples in the order they asked (the run's order, with its
    large problems spread among the small ones), a large one passed over while the large ones hold their share.

    A large problem's samples wait for the GPU one by one: without their own share, many samples of one
    (``--samples`` at or above ``limit``) took every place while they waited, and the other slots sat idle.

    Args:
        limit: places in all (at least 1).
        lane: the large problems' keys.
        lane_gpus: GPUs whose slots share them (each runs one large job at a time): the large ones' share is a
            quarter of ``limit``, at least two per such GPU (one evaluated, the next generated and built), at
            most ``limit``.

    Usage: ``async with gate(problem_key): ...``.

    Raises:
        ValueError: ``limit`` is below 1.
    """

    def __init__(self, limit: int, lane: set[str] | frozenset[str] = frozenset(), lane_gpus: int = 1) -> None:
        if limit < 1:
            raise ValueError(f"SampleGate: limit must be at least 1, not {limit}")
        self.limit = limit
        self.lane = frozenset(lane)
        self.lane_limit = min(limit, max(1, limit // 4, 2 * max(0, lane_gpus)))
        self._in = 0
        self._lane_in = 0
        self._waiters: list[tuple[asyncio.Future[None], bool]] = []  # in the order they asked

    def _dispatch(self) -> None:
        self._waiters = [w for w in self._waiters if not w[0].done()]  # (cancelled while waiting)
        i = 0
        while i < len(self._waiters) and self._in < self.limit:
            fut, large = self._waiters[i]
            if large and self._lane_in >= self.lane_limit:
                i += 1  # passed over: the small ones behind it go on
                continue
            self._waiters.pop(i)
            self._in += 1
            self._lane_in += large
            fut.set_result(None)

    def _leave(self, large: bool) -> None:
        self._in -= 1
        self._lane_in -= large
        self._dispatch()

    @contextlib.asynccontextmanager
    async def __call__(self, key: str) -> AsyncIterator[None]:
        large = key in self.lane
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((fut, large))
        self._dispatch()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed a place just as it was cancelled
                self._leave(large)
            else:
                fut.cancel()
                self._dispatch()
            raise
        try:
            yield
        finally:
            self._leave(large)


#: ``(run_name, db)`` of runs this process left ``interrupted`` (Ctrl-C, a budget's SIGINT): the CLI says
#: how to continue them
INTERRUPTED: list[tuple[str, str | None]] = []


def _shared_gpus(slots: list[dict[str, Any]]) -> int:
    """How many CUDA devices carry two or more of the local executor's slots (see :func:`_slots_share_a_gpu`)."""
    gpus = [d for d in (str(sl.get("device", "")) for sl in slots) if d.startswith("cuda")]
    return sum(1 for d in set(gpus) if gpus.count(d) > 1)


def _slots_share_a_gpu(slots: list[dict[str, Any]]) -> bool:
    """Whether two of the local executor's slots (dicts with ``"device"``) are on the same CUDA device
    (``--gpus 0,0`` or ``--slots-per-gpu``). Ray's slots (``ray:<node>:cuda``) never are: each is its own GPU."""
    return _shared_gpus(slots) > 0


def _interleave_todo(todo: list[tuple[Any, int]], phase_s: dict[str, float],
                     sizing: Any = None,
                     ) -> tuple[list[tuple[Any, int]], set[str]]:
    """``todo`` (sample specs with their start turns, in problem order) with its large problems spread evenly
    among the small ones (:func:`.schedule.interleave_large`, sized in a child process by
    :func:`.schedule.problem_sizes`); a problem's samples stay together. Sets ``phase_s["schedule"]`` to
    the seconds that took (waiting for ``sizing``, where given: a :class:`.schedule.Sizing` of the run's
    problems, started earlier and keyed by problem key).

    Returns:
        ``(todo, lane)``: the new order, and the keys of the problems of at least
        :data:`.schedule.LANE_BYTES` (run one per GPU at a time: ``EvalJob.large``).
    """
    from .schedule import LANE_BYTES, interleave_large, problem_sizes

    t0 = time.perf_counter()
    groups: dict[str, list[tuple[Any, int]]] = {}
    for item in todo:
        groups.setdefault(item[0].problem.key, []).append(item)
    if sizing is not None and set(groups) <= sizing.keys:
        sizes = sizing.result()
    else:
        if sizing is not None:
            sizing.stop()
        sizes = problem_sizes({k: v[0][0].problem.code for k, v in groups.items()})
    order = interleave_large(list(groups), sizes)
    phase_s["schedule"] = time.perf_counter() - t0
    lane = {k for k in groups if sizes.get(k, -1) >= LANE_BYTES}
    return [item for k in order for item in groups[k]], lane


def _start_sizing(cfg: RunConfig, problems: list[Problem], cache: Path | None = None) -> Any:
    """A :class:`.schedule.Sizing` of ``problems``, started before the device slots (whose start-up, about
    10 s on an H200, it then overlaps), where the local executor will put several slots on one GPU; None
    otherwise. ``cache``: the folder where sizes are kept between runs (the build cache's)."""
    if cfg.executor != "local":
        return None
    try:
        devices = _slot_devices(cfg)
    except Exception:  # noqa: BLE001 - the executor reports a bad --gpus itself
        return None
    if not _slots_share_a_gpu([{"device": d} for d in devices]):
        return None
    from .schedule import Sizing

    try:
        return Sizing({p.key: p.code for p in problems}, cache=cache)
    except Exception:  # noqa: BLE001 - sizing only orders the run (a full /tmp, say): sized later or not at all
        return None


def _plan_samples(ad: ModelAdapter, problems: list[Problem], cfg: RunConfig, source: str, store: Any,
                  run_name: str | None, prog: Progress) -> tuple[tuple[str, ...], dict[tuple[int, int, str, int], int],
                                                                 list[tuple[SampleSpec, int]], int]:
    """What a run evaluates: the adapter's samples for ``problems``, less the turns a resumed run
    (``run_name``; None for a new run) has stored already.

    On resume, turns of this run's planned samples that failed for a reason not the candidate's (the provider's
    request, a harness error) are evaluated again, with the turns after them. Nothing is deleted here: the new
    turn replaces them when it is stored (record_attempt's replace_from_turn, one transaction), so a run cut
    again loses nothing, and the new verdict keeps the old ones.

    Returns:
        ``(unanswered, replace_from, todo, skipped)``: the keys of the problems without a sample;
        (level, problem_id, model, sample_id) -> the first turn to evaluate again; each sample to evaluate with
        its first turn to run; how many samples are complete.

    Raises:
        ConfigError: the adapter has no sample for any of the problems (nothing to evaluate).
    """
    specs = ad.plan(problems, cfg.samples)
    answered = {(sp.problem.level, sp.problem.problem_id) for sp in specs}
    unanswered = tuple(p.key for p in problems if (p.level, p.problem_id) not in answered)
    stray = _stray_generations(ad, problems, cfg)
    if stray:
        prog.note(f"{len(stray)} line(s) of {cfg.model} name problems that {source} does not hold and "
                  "are not evaluated (check --problems): " + ", ".join(stray[:10])
                  + (" ..." if len(stray) > 10 else ""))
    if unanswered and specs:
        prog.note(f"{len(unanswered)} of the {len(problems)} selected problem(s) have no sample from "
                  f"{cfg.model} and count as not solved: {', '.join(unanswered[:10])}"
                  + (" ..." if len(unanswered) > 10 else ""))
    if not specs:
        raise ConfigError(
            f"model {cfg.model!r} has no sample for any of the {len(problems)} selected problem(s); "
            "nothing to evaluate",
            fix="for replay: match the file's level and problem_id to --problems/--level/--ids (lines "
                "without code are skipped, with a warning each); for bundled: pick a variant that has "
                "solutions for these problems (-O variant=all)")
    planned = {(sp.problem.level, sp.problem.problem_id, sp.model, sp.sample_id) for sp in specs}
    replace_from: dict[tuple[int, int, str, int], int] = {}
    for (lv, pid, m, sid, t) in (store.retryable_attempts(run_name) if run_name is not None else {}):
        k = (lv, pid, m, sid)
        if k in planned:
            replace_from[k] = min(t, replace_from.get(k, t))
    if replace_from:
        prog.note(f"resuming {run_name}: {len(replace_from)} sample(s) with a generation or harness error "
                  "are evaluated again")
    done = store.done_attempts(run_name) if run_name is not None else set()
    total_turns = cfg.turns if ad.is_llm else 1
    todo: list[tuple[SampleSpec, int]] = []
    skipped = 0
    for spec in specs:
        p = spec.problem
        turns_done = sorted(t for (lv, pid, m, s, t) in done
                            if lv == p.level and pid == p.problem_id and m == spec.model and s == spec.sample_id)
        redo = replace_from.get((p.level, p.problem_id, spec.model, spec.sample_id))
        if redo is not None:
            turns_done = [t for t in turns_done if t < redo]
        if len(turns_done) >= total_turns:
            skipped += 1
            continue
        todo.append((spec, len(turns_done)))
    return unanswered, replace_from, todo, skipped


def _stray_generations(adapter: Any, problems: list[Problem], cfg: RunConfig) -> list[str]:
    """Replay lines for a level and id that --level/--ids select but the problem source lacks (``L1/99 (line 5)``):
    they are not evaluated, and a wrong --problems would otherwise drop them without a word."""
    from .adapters.replay import ReplayAdapter
    from .problems import parse_id_ranges

    if not isinstance(adapter, ReplayAdapter):
        return []
    held = {(p.level, p.problem_id) for p in problems}
    ids = parse_id_ranges(cfg.ids)
    return [f"L{g.level}/{g.problem_id} (line {g.line_no})" for g in adapter.generations
            if (g.level, g.problem_id) not in held and (cfg.levels is None or g.level in cfg.levels)
            and (ids is None or g.problem_id in ids)]


def resume_command(run_name: str, db: str | None) -> str:
    """The command that continues ``run_name`` (in the store ``db``; None: the default store)."""
    import shlex

    return f"kbench run --run-name {shlex.quote(run_name)} --resume" + (f" --db {shlex.quote(db)}" if db else "")


def _warm_record(stored: Any, warm_info: dict[str, Any], warm_t0: list[float]) -> dict[str, Any]:
    """The run's ``hardware["warm"]``: this part's per-problem warm-up record merged over the one an earlier,
    interrupted part of the same run stored (``stored``: its RunInfo, None for a new run), so a resumed run
    keeps the compile times of the problems it did not compile again. ``_wall_s`` is this part's warm-up
    wall time (to the cut, for a run cut short: then ``_cut`` is true); ``_wall_s_parts`` lists every part's."""
    earlier = dict(((getattr(stored, "hardware", None) or {}).get("warm")) or {})
    rec = {k: v for k, v in earlier.items() if not k.startswith("_")}
    rec.update(warm_info)
    if "_wall_s" not in warm_info:
        rec["_cut"] = True
        rec["_wall_s"] = round(time.perf_counter() - warm_t0[0], 2) if warm_t0 else 0.0
    parts = list(earlier.get("_wall_s_parts") or ([earlier["_wall_s"]] if "_wall_s" in earlier else []))
    rec["_wall_s_parts"] = parts + [rec["_wall_s"]]
    return rec


async def measure_baselines_for(problems: list[Problem], *, protocol: Protocol, db: str | None, gpus: str | None,
                                modes: list[str] | None = None, progress: Progress | None = None,
                                seed: int = 0, force: bool = False) -> list[dict[str, Any]]:
    """Measure (or reuse) eager and torch.compile baselines for ``problems`` ahead of runs (``kbench baseline``).

    Returns:
        One row per problem and mode: level, problem_id, mode, value_ms, cached (bool), error.
    """
    from .store import Store

    prog: Progress = progress or _NullProgress()
    _check_environment()  # before the store file is made
    cache = extension_cache_dir(RunConfig(gpus=gpus))
    store = Store(db)
    try:
        # nothing else runs beside `kbench baseline`, and torch.compile runs inside the slots: no pinning
        executor = _make_executor(RunConfig(gpus=gpus, timing_cpus=0), cache)
    except BaseException:
        store.close()
        raise
    rows: list[dict[str, Any]] = []
    try:
        fp = executor.fingerprint()
        b = _Baselines(store, fp, protocol)
        modes = modes or baseline_modes(protocol)
        prog.total("time", len(problems))
        for p in problems:
            known = {} if force else b.known(p, modes)
            missing = [m for m in modes if m not in known]
            info: dict[str, Any] = {}
            got: dict[str, TimingStats] = {}
            if missing:
                try:
                    got, info, _ = await executor.measure_baselines(p, protocol, seed, missing)
                except RuntimeError as e:  # the slot's worker died (killed for memory, say): this problem's
                    # row says so and the others go on; the slot restarts for the next problem
                    why = str(e).strip() or type(e).__name__
                    if why.endswith(":"):
                        why += " no message (killed from outside, e.g. for memory: exit code -9 is SIGKILL)"
                    info = {m: {"error": why} for m in missing}
                else:
                    b.put(p, got, info)
            for m in modes:
                st = known.get(m) or got.get(m)
                rows.append({"level": p.level, "problem_id": p.problem_id, "name": p.name, "mode": m,
                             "value_ms": st.value_ms if st else None, "cached": m in known,
                             "error": (info.get(m) or {}).get("error") if not st else None})
            prog.advance("time")
    finally:
        await executor.close()
        store.close()
    return rows
