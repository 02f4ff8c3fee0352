"""The results store: runs, samples, turns, verdicts, timings and baselines in one SQL database.

SQLite by default (``results/kbench.db``), PostgreSQL for a team sharing one store. The schema is
managed by alembic (``migrations/`` beside this file) and upgraded to head whenever a store is
opened, so a DB written by an older kbench is migrated, never rewritten. Every write is one
transaction: a run killed at any moment loses at most the candidate whose result was in flight.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import Engine, create_engine, delete, event, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, IntegrityError, NoSuchModuleError
from sqlalchemy.orm import Session

from ..core import Candidate, EvalResult, Outcome, Problem, TimingStats
from ..errors import ConfigError, PrerequisiteError, StoreError
from . import _jsonsafe
from .liveness import STALE_AFTER_S, RunnerState, current_runner, format_duration, judge_runner
from .models import (
    AttemptRow,
    BaselineRow,
    ProblemRow,
    ResultRow,
    RunProblemRow,
    RunRow,
    SampleRow,
    TimingRow,
)

__all__ = [
    "DEFAULT_DB_URL",
    "RESULT_COLUMNS",
    "AttemptRecord",
    "BaselineRecord",
    "RunInfo",
    "RunStatus",
    "Store",
    "normalize_db_url",
    "upgrade_schema",
]

log = logging.getLogger(__name__)

DEFAULT_DB_URL = "sqlite:///results/kbench.db"
_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_PG_LOCK_KEY = 7_305_926_114  # advisory lock that serializes concurrent schema upgrades on PostgreSQL
_SQLITE_BUSY_MS = 30_000

# Columns of results_frame, in order (an empty run still yields them all).
RESULT_COLUMNS: tuple[str, ...] = (
    "level",
    "problem_id",
    "name",
    "problem_sha256",
    "protocol",
    "protocol_fingerprint",
    "model",
    "sample_id",
    "turn",
    "backend",
    "outcome",
    "tag",
    "compiled",
    "correct",
    "passed",
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
    "problem_flags",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "cost_usd",
    "latency_s",
    "generation_error",
    "findings",
    "error",
    "code",
    "device",
    "created_at",
    "attempt_id",
    "result_id",
)
_PASSED = ("correct", "policy", "timing_invalid")
_BASELINE_FILTERS = (
    "problem_sha256",
    "level",
    "problem_id",
    "name",
    "hardware_fingerprint",
    "software_fingerprint",
    "protocol_fingerprint",
    "precision",
    "mode",
    "measured_here",
    "source",
)


class RunStatus(StrEnum):
    """Life cycle of a run. A run stored as ``running`` whose runner is gone reads as ``interrupted``
    (:mod:`.liveness`)."""

    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run as stored.

    Attributes:
        run_name: unique name.
        model: the model spec the run was started with (a replay run may hold several models).
        status: a :class:`RunStatus` value.
        created_at, finished_at: UTC timestamps (``finished_at`` None until finished).
        protocol: ``Protocol.to_dict()`` of the run.
        config: the run's resolved settings.
        hardware: hardware fingerprint dict (GPU, driver, CUDA, torch, clocks...).
        problem_count: number of problems in the run's scope.
        protocol_name, precision: from ``protocol``.
        protocol_fingerprint, hardware_fingerprint: short hashes used to group results.
        kbench_version: the kbench version that created the run.
        status_note: why a run reads as it does where the stored status alone does not say: a run stored as
            ``running`` whose runner is gone reads as ``interrupted``, with e.g. ``"runner gone: pid 812 on
            this host (h) no longer runs (killed or crashed)"``; a live one has ``"runner: pid 812 on ..."``.
        runner_host, runner_pid: the process that runs (or last ran) the run ("" and None before kbench
            recorded it).
        heartbeat_at: the runner's last heartbeat (UTC), or None.
    """

    run_name: str
    model: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    protocol: dict[str, Any]
    config: dict[str, Any]
    hardware: dict[str, Any]
    problem_count: int
    protocol_name: str = ""
    precision: str = ""
    protocol_fingerprint: str = ""
    hardware_fingerprint: str = ""
    kbench_version: str = ""
    status_note: str = ""
    runner_host: str = ""
    runner_pid: int | None = None
    heartbeat_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One stored turn of a sample (what resuming a multi-turn sample needs).

    Attributes:
        turn: refinement step, from 0.
        messages: the prompt messages sent for this turn (chat format), or None.
        reply: the model's reply text, or None.
        code: the candidate source evaluated, or None when the reply held none.
        result: the verdict.
        backend: the candidate's backend ("none" without a candidate).
        generation: the stored generation fields (tokens, cost, latency, error...).
        level, problem_id, model, sample_id: which sample.
        attempt_id, result_id: store ids.
        created_at: when it was recorded (UTC).
    """

    turn: int
    messages: list[dict[str, Any]] | None
    reply: str | None
    code: str | None
    result: EvalResult
    backend: str = ""
    generation: dict[str, Any] = dataclasses.field(default_factory=dict)
    level: int = 0
    problem_id: int = 0
    model: str = ""
    sample_id: int = 0
    attempt_id: int = 0
    result_id: int = 0
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class BaselineRecord:
    """A stored baseline timing of one problem in one mode.

    Attributes:
        id: store id (``EvalResult.baseline_id``).
        problem_sha256, level, problem_id, name: the problem.
        hardware_fingerprint, software_fingerprint, protocol_fingerprint, precision: the key.
        mode: ``"eager"`` or ``"compile:<mode>"``.
        stats: timing statistics (ms).
        hardware: the hardware description it was measured on.
        measured_here: False for imported timings (e.g. KernelBench's published JSON).
        source: ``"measured"`` or ``"imported:<hardware>"``.
        created_at: when stored (UTC).
    """

    id: int
    problem_sha256: str
    level: int
    problem_id: int
    name: str
    hardware_fingerprint: str
    software_fingerprint: str
    protocol_fingerprint: str
    precision: str
    mode: str
    stats: TimingStats
    hardware: dict[str, Any]
    measured_here: bool
    source: str
    created_at: datetime | None = None

    @property
    def value_ms(self) -> float:
        """The headline time (the stats' protocol statistic), ms."""
        return self.stats.value_ms


_BACKENDS = ("sqlite", "postgresql")
_URL_FORMS = "sqlite:///path/to/kbench.db (or just the file's path) or postgresql://user@host:5432/db"
#: what to pip install for a database driver module that is missing (others: the module's own name)
_DRIVER_PACKAGES = {"psycopg": "'kernelbench-harness[postgres]'", "psycopg2": "psycopg2-binary"}


def normalize_db_url(url: str | None) -> str:
    """The SQLAlchemy URL for ``url``: None means :data:`DEFAULT_DB_URL`; a bare ``postgresql://``
    or ``postgres://`` gets the psycopg (v3) driver; a plain path means an SQLite file.

    Raises:
        ConfigError: when ``url`` cannot be parsed, names a back end other than SQLite or PostgreSQL
            (``mysql://...``), a driver SQLAlchemy does not know (``postgresql+nosuch://``), or an asyncio
            driver (``postgresql+asyncpg://``, ``+psycopg_async``, ``sqlite+aiosqlite://``; the fix names the
            synchronous form).
    """
    if url is None or str(url).strip() == "":
        return DEFAULT_DB_URL
    url = str(url).strip()
    if "://" not in url:  # a file path
        return f"sqlite:///{url}"
    if url.startswith(("postgres://", "postgres+")):
        url = "postgresql" + url[len("postgres") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    try:
        parsed = make_url(url)
    except ArgumentError as e:
        raise ConfigError(f"cannot parse database URL {url!r}: {e}", fix=f"use {_URL_FORMS}") from None
    safe = parsed.render_as_string(hide_password=True)
    backend = parsed.get_backend_name()
    if backend not in _BACKENDS:
        raise ConfigError(
            f"unsupported database {backend!r} in {safe}: kbench stores its results in SQLite or PostgreSQL",
            fix=f"pass --db as {_URL_FORMS}",
        )
    try:
        dialect = parsed.get_dialect()  # an unknown driver name; a missing driver package is found when the engine is made
    except NoSuchModuleError:
        raise ConfigError(
            f"unknown {backend} driver {parsed.get_driver_name()!r} in {safe}",
            fix=f"pass --db as {_URL_FORMS} (the default driver)",
        ) from None
    if getattr(dialect, "is_async", False):  # asyncpg, psycopg_async, aiosqlite: the store's engine is not async
        sync = parsed.set(drivername=backend).render_as_string(hide_password=True)
        raise ConfigError(
            f"the {backend} driver {parsed.get_driver_name()!r} in {safe} is an asyncio driver, and kbench's "
            "store connects synchronously",
            fix=f"pass --db in its synchronous form: {sync}",
        )
    return url


def _sqlite_path(url: str) -> Path | None:
    """The file behind an SQLite URL (None for other back ends, ``:memory:`` and ``file:`` URIs)."""
    parsed = make_url(url)
    db = parsed.database
    if parsed.get_backend_name() != "sqlite" or not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db)


def _foreign_file_error(safe_url: str, tables: Sequence[str]) -> StoreError:
    return StoreError(
        f"{safe_url} is not a kbench results database (it holds the table(s) "
        f"{', '.join(tables[:5])}{' ...' if len(tables) > 5 else ''} and no kbench schema)",
        fix="pass --db with the path of a kbench store, or of a new file",
    )


def _sqlite_readonly_uri(path: Path) -> str:
    """An ``sqlite3`` URI that opens ``path`` read-only, taking no lock a writer waits for and writing nothing.

    ``mode=ro`` reads beside a running writer through the WAL index (``-shm``), which SQLite creates when it is
    missing. Where this process cannot write the file or its folder (a chmod 0444 store, a read-only mount)
    and no ``-wal`` file with content lies beside it (a WAL writer keeps one while it runs), the file is
    opened ``immutable``: no ``-shm`` is needed or made (``mode=ro`` fails there: "attempt to write a
    readonly database").
    """
    import os

    p = path.resolve()
    wal = p.with_name(p.name + "-wal")
    try:
        wal_in_use = wal.stat().st_size > 0
    except OSError:
        wal_in_use = False
    unwritable = not os.access(p, os.W_OK) or not os.access(p.parent, os.W_OK | os.X_OK)
    return f"{p.as_uri()}?mode=ro" + ("&immutable=1" if unwritable and not wal_in_use else "")


def _check_sqlite_file(path: Path, safe_url: str) -> None:
    """Refuse an existing file that is another program's SQLite database, or no database at all.

    The file is opened read-only, before any connection of the store's engine (which switches the
    journal to WAL) can write to it.

    Raises:
        StoreError: the file cannot be read as an SQLite database, or holds tables but no kbench schema.
    """
    import sqlite3

    if not path.is_file() or path.stat().st_size == 0:  # a new (or empty) file: the store creates its schema
        return
    try:
        conn = sqlite3.connect(_sqlite_readonly_uri(path), uri=True, timeout=_SQLITE_BUSY_MS / 1000)
        try:
            tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                            if not r[0].startswith("sqlite_"))
            versioned = "alembic_version" in tables and conn.execute(
                "SELECT count(*) FROM alembic_version").fetchone()[0] > 0
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:  # not a database, unreadable, locked past the timeout
        raise StoreError(
            f"cannot open the results database {safe_url}: {e}",
            fix="pass --db with the path of a kbench store, or of a new file in a folder you can write",
        ) from None
    if tables and not versioned:
        raise _foreign_file_error(safe_url, tables)


def _alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _upgrade(engine: Engine, url: str, safe_url: str, revision: str) -> None:
    """Upgrade the schema behind ``engine`` to ``revision`` in one transaction.

    Raises:
        StoreError: the database is at a revision this kbench does not know (a newer kbench wrote it).
    """
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    cfg = _alembic_config(url)
    script = ScriptDirectory.from_config(cfg)
    known = {rev.revision for rev in script.walk_revisions()}
    head = script.get_current_head()
    with engine.connect() as conn:
        conn.execution_options(kbench_write=True)
        with conn.begin():
            if engine.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
            current = set(MigrationContext.configure(conn).get_current_heads())
            if not current and engine.dialect.name == "sqlite":
                others = sorted(inspect(conn).get_table_names())
                if others:  # another program's SQLite file: kbench would write its tables into it
                    raise _foreign_file_error(safe_url, others)
            if current - known:
                raise _newer_schema_error(safe_url, current - known, head)
            if revision == "head" and current == {head}:
                return
            cfg.attributes["connection"] = conn
            try:
                command.upgrade(cfg, revision)
            except CommandError as e:
                raise StoreError(f"cannot migrate {safe_url}: {e}") from None
            log.info("results store %s migrated to %s", safe_url, revision)


def _newer_schema_error(safe_url: str, unknown: set[str], head: str) -> StoreError:
    """The error for a store at revisions ``unknown``, which this kbench (latest ``head``) does not know."""
    return StoreError(
        f"the results database {safe_url} has schema revision {', '.join(sorted(unknown))}, "
        f"newer than this kbench knows (latest known: {head})",
        fix="upgrade kbench (pip install -U kernelbench-harness) to read it, or pass --db with another database",
    )


def _check_revision(engine: Engine, url: str, safe_url: str) -> None:
    """Check, without writing, that the schema behind ``engine`` is this kbench's latest (for read-only opens).

    Raises:
        StoreError: the database holds no kbench schema, an older revision (the fix names ``kbench db
            upgrade``), or a revision this kbench does not know.
    """
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_alembic_config(url))
    known = {rev.revision for rev in script.walk_revisions()}
    head = script.get_current_head()
    with engine.connect() as conn:
        current = set(MigrationContext.configure(conn).get_current_heads())
    if current == {head}:
        return
    if current - known:
        raise _newer_schema_error(safe_url, current - known, head)
    if not current:
        raise StoreError(f"the results database {safe_url} is empty: it holds no runs yet",
                         fix="run `kbench run` first, or pass --db with the URL of your store")
    db_arg = "--db <its URL>" if "***" in safe_url else f"--db {safe_url}"
    raise StoreError(
        f"the results database {safe_url} has schema revision {', '.join(sorted(current))}, older than this "
        f"kbench's ({head}); this command only reads the store and does not upgrade it",
        fix=f"upgrade it with `kbench db upgrade {db_arg}` (a `kbench run` on it upgrades it too; older kbench "
            "versions cannot read it afterwards), then run this command again",
    )


def upgrade_schema(url: str | None, revision: str = "head") -> None:
    """Create or upgrade the store's schema at ``url`` to ``revision`` (an alembic revision id).

    :class:`Store` does this to head on open; an explicit older revision is for tests of the
    migrations and for debugging.

    Raises:
        StoreError: as :class:`Store`.
    """
    full = normalize_db_url(url)
    safe_url = make_url(full).render_as_string(hide_password=True)
    path = _sqlite_path(full)
    if path is not None:
        _check_sqlite_file(path, safe_url)
    engine = Store._make_engine(full)
    try:
        _upgrade(engine, full, safe_url, revision)
    finally:
        engine.dispose()


def _now() -> datetime:
    return datetime.now(UTC)


def _db_now(s: Session) -> datetime:
    """The database's clock on PostgreSQL (every host that shares the store reads the one clock, so a
    heartbeat's age does not depend on how far apart the hosts' clocks are), this machine's on SQLite."""
    if s.get_bind().dialect.name == "postgresql":
        from sqlalchemy import func

        return _aware(s.scalar(select(func.now()))) or _now()
    return _now()


def _aware(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _short_hash(obj: Any) -> str:
    return hashlib.sha256(_jsonsafe.dumps(obj).encode()).hexdigest()[:16]


def _hardware_fingerprint(hardware: Mapping[str, Any]) -> str:
    for key in ("hardware_fingerprint", "fingerprint"):
        fp = hardware.get(key)
        if isinstance(fp, str) and fp:
            return fp[:64]
    return _short_hash(dict(hardware))


def _protocol_fingerprint(protocol: Mapping[str, Any]) -> str:
    fp = protocol.get("fingerprint")
    if isinstance(fp, str) and fp:
        return fp[:64]
    try:
        from ..protocols import Protocol

        return Protocol.from_dict(dict(protocol)).fingerprint()
    except (TypeError, ValueError, KeyError):
        return _short_hash(dict(protocol))


def _stats_columns(stats: TimingStats) -> dict[str, Any]:
    return {
        "timer": stats.timer,
        "statistic": stats.statistic,
        "n": int(stats.n),
        "value_ms": stats.value_ms,
        "median_ms": stats.median_ms,
        "mean_ms": stats.mean_ms,
        "std_ms": stats.std_ms,
        "min_ms": stats.min_ms,
        "max_ms": stats.max_ms,
        "ci95_low_ms": stats.ci95_low_ms,
        "ci95_high_ms": stats.ci95_high_ms,
        "samples_ms": [float(x) for x in stats.samples_ms],
    }


def _restore_stats(d: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not d:
        return None
    out = dict(d)
    for k in ("median_ms", "mean_ms", "std_ms", "min_ms", "max_ms", "ci95_low_ms", "ci95_high_ms"):
        if k in out:
            out[k] = _jsonsafe.restore_float(out[k])
    out["samples_ms"] = [_jsonsafe.restore_float(x) for x in out.get("samples_ms") or ()]
    return out


def _result_from_json(d: Mapping[str, Any]) -> EvalResult:
    """The :class:`EvalResult` stored as JSON by :meth:`Store.record_attempt`."""
    d = dict(d)
    for k in ("max_abs_err", "max_rel_err", "eager_ms", "compile_ms"):
        d[k] = _jsonsafe.restore_float(d.get(k))
    d["candidate"] = _restore_stats(d.get("candidate"))
    d["phase_s"] = {k: _jsonsafe.restore_float(v) for k, v in (d.get("phase_s") or {}).items()}
    return EvalResult.from_dict(d)


def _baseline_value(st: Any) -> float | None:
    """Headline time (ms) of a TimingStats dict (or a bare number)."""
    if isinstance(st, (int, float)):
        return float(st)
    if not isinstance(st, dict):
        return None
    key = "mean_ms" if st.get("statistic") == "mean" else "median_ms"
    return _jsonsafe.restore_float(st.get(key))


def _stats_from_row(row: BaselineRow | TimingRow) -> TimingStats:
    return TimingStats(
        median_ms=row.median_ms,
        mean_ms=row.mean_ms,
        std_ms=row.std_ms,
        min_ms=row.min_ms,
        max_ms=row.max_ms,
        ci95_low_ms=row.ci95_low_ms,
        ci95_high_ms=row.ci95_high_ms,
        n=row.n,
        samples_ms=tuple(_jsonsafe.restore_float(x) for x in row.samples_ms or ()),  # type: ignore[misc]
        timer=row.timer,
        statistic=row.statistic,
    )


def _generation_dict(generation: Any) -> dict[str, Any]:
    if generation is None:
        return {}
    if dataclasses.is_dataclass(generation) and not isinstance(generation, type):
        return dataclasses.asdict(generation)
    return dict(generation)


class Store:
    """The results store (see the module docstring).

    Args:
        url: SQLAlchemy URL; None means ``sqlite:///results/kbench.db`` relative to the current
            directory (its folder is created). ``postgresql+psycopg://user@host:5432/db`` for
            PostgreSQL (a bare ``postgresql://`` gets the psycopg driver); a search path can be
            passed as ``?options=-csearch_path%3Dmyschema``.
        create: when False, a missing SQLite file raises instead of being created.
        read_only: open for reading only (``kbench report``, ``runs list``, ``leaderboard``...): nothing is
            created, migrated or written, and no lock is taken that a running sweep's writes wait for; an
            SQLite file opens read-only (a chmod 0444 file, a read-only folder), and a schema older than this
            kbench's is an error naming ``kbench db upgrade`` instead of being upgraded. Writing methods raise
            :class:`StoreError`.

    Raises:
        ConfigError: the URL is not an SQLite or PostgreSQL one (see :func:`normalize_db_url`).
        StoreError: the database cannot be reached or opened, is another program's SQLite file (refused
            before anything is written to it), or its schema revision is newer than this kbench knows
            (the message names the fix).
        PrerequisiteError: the URL's database driver (psycopg by default for PostgreSQL) is not installed.

    A store may be used from several threads; each call runs in its own session and transaction.
    On SQLite, writes take the database's write lock at the start of their transaction
    (``BEGIN IMMEDIATE``) and wait up to 30 s for another writer, and the journal is in WAL mode,
    so readers (a report being built) never block the writing run.
    """

    def __init__(self, url: str | None = None, *, create: bool = True, read_only: bool = False) -> None:
        self.url = normalize_db_url(url)
        self.dialect = make_url(self.url).get_backend_name()
        self.read_only = read_only
        path = _sqlite_path(self.url)
        if path is not None:
            if not path.exists() and (not create or read_only):
                raise StoreError(
                    f"no results database at {path}",
                    fix="run `kbench run` first, or pass --db with the URL of your store",
                )
            _check_sqlite_file(path, self.safe_url)  # before the engine's first connection writes to it
            if not read_only:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise StoreError(f"cannot create the folder of the results database {path}: {e.strerror}",
                                     fix="pass --db with a path in a folder you can write") from None
        self._engine = self._make_engine(self.url, readonly_path=path if read_only else None)
        try:
            if read_only:
                _check_revision(self._engine, self.url, self.safe_url)
            else:
                self._migrate()
        except DatabaseError as e:  # OperationalError among them: unreachable, unwritable, not a database
            self._engine.dispose()
            raise StoreError(
                f"cannot open the results database {self.safe_url}: {e.orig}",
                fix="pass --db with the path of a kbench store, or of a new file in a folder you can write"
                if self.dialect == "sqlite" else "check that the server is running and the URL is right (--db)",
            ) from None
        except BaseException:
            self._engine.dispose()
            raise

    # -- connection ---------------------------------------------------------------------------

    @property
    def safe_url(self) -> str:
        """The URL with any password hidden."""
        return make_url(self.url).render_as_string(hide_password=True)

    @staticmethod
    def _make_engine(url: str, *, readonly_path: Path | None = None) -> Engine:
        kw: dict[str, Any] = {"json_serializer": _jsonsafe.dumps, "json_deserializer": _jsonsafe.loads}
        if readonly_path is not None:  # SQLite, read-only: the file opened by a URI (mode=ro or immutable)
            import sqlite3

            uri = _sqlite_readonly_uri(readonly_path)
            kw["creator"] = lambda: sqlite3.connect(uri, uri=True, timeout=_SQLITE_BUSY_MS / 1000,
                                                    check_same_thread=False)
        elif make_url(url).get_backend_name() == "sqlite":
            kw["connect_args"] = {"timeout": _SQLITE_BUSY_MS / 1000, "check_same_thread": False}
        else:
            kw["pool_pre_ping"] = True
        try:
            engine = create_engine(url, **kw)
        except ModuleNotFoundError as e:  # the driver's package (the back end and driver name are known)
            parsed = make_url(url)
            backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
            if e.name in ("sqlite3", "_sqlite3"):
                fix = f"use a Python built with its sqlite3 module, or pass --db as {_URL_FORMS}"
            else:
                fix = f"pip install {_DRIVER_PACKAGES.get(e.name or '', e.name)}"
                if backend == "postgresql" and driver != "psycopg":
                    fix += (f", or drop '+{driver}' from --db for kbench's default driver, psycopg "
                            f"(pip install {_DRIVER_PACKAGES['psycopg']})")
            raise PrerequisiteError(
                f"the {backend} driver {driver!r} is not installed (no module named {e.name!r})", fix=fix,
            ) from None
        if engine.dialect.name == "sqlite":

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn: Any, _record: Any) -> None:
                # Let SQLAlchemy's "begin" event below issue BEGIN itself (pysqlite's own
                # transaction handling defers it and breaks transactional DDL).
                dbapi_conn.isolation_level = None
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_MS}")
                if readonly_path is None:
                    cur.execute("PRAGMA journal_mode=WAL")
                cur.close()

            @event.listens_for(engine, "begin")
            def _on_begin(conn: Any) -> None:
                write = conn.get_execution_options().get("kbench_write", False)
                conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    def _migrate(self, revision: str = "head") -> None:
        _upgrade(self._engine, self.url, self.safe_url, revision)

    def schema_revision(self) -> str | None:
        """The alembic revision the database is at (None for an empty database)."""
        from alembic.runtime.migration import MigrationContext

        with self._engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """A session inside one write transaction: committed on exit, rolled back on error.

        Raises:
            StoreError: the store was opened read-only.
        """
        if self.read_only:
            raise StoreError(f"the results database {self.safe_url} was opened read-only",
                             fix="open it with Store(url) to write")
        with self._engine.connect() as conn:
            conn.execution_options(kbench_write=True)
            with conn.begin(), Session(bind=conn, expire_on_commit=False, autoflush=True) as s:
                yield s
                s.flush()

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self._engine, expire_on_commit=False) as s:
            yield s

    def close(self) -> None:
        """Release every connection."""
        self._engine.dispose()

    def __enter__(self) -> Store:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.safe_url!r})"

    # -- runs ---------------------------------------------------------------------------------

    @staticmethod
    def _run_row(s: Session, run_name: str) -> RunRow:
        row = s.scalars(select(RunRow).where(RunRow.run_name == run_name)).one_or_none()
        if row is None:
            raise StoreError(f"no run named {run_name!r} in this store", fix="see `kbench runs list`")
        return row

    @staticmethod
    def _problem_pks(s: Session, problems: Iterable[Problem]) -> dict[str, int]:
        """Ids of the problems' code rows, inserting the missing ones (deduplicated by SHA-256)."""
        by_sha = {p.code_sha256: p for p in problems}
        found: dict[str, int] = {}
        shas = list(by_sha)
        for i in range(0, len(shas), 500):
            chunk = shas[i : i + 500]
            for pk, sha in s.execute(
                select(ProblemRow.id, ProblemRow.code_sha256).where(ProblemRow.code_sha256.in_(chunk))
            ):
                found[sha] = pk
        for sha, p in by_sha.items():
            if sha not in found:
                row = ProblemRow(code_sha256=sha, code=p.code)
                s.add(row)
                s.flush()
                found[sha] = row.id
        return found

    def create_run(
        self,
        run_name: str,
        *,
        model: str,
        protocol: dict[str, Any],
        config: dict[str, Any],
        hardware: dict[str, Any],
        problems: Sequence[Problem],
    ) -> None:
        """Record a new run and its scope (the problems ``fast_p`` is computed over).

        Args:
            run_name: unique name.
            model: the model spec.
            protocol: ``Protocol.to_dict()``.
            config: resolved run settings (JSON-able).
            hardware: hardware fingerprint dict (``hardware.collect_fingerprint``); its
                ``"hardware_fingerprint"`` key, when present, is the short hash used to group results,
                else a hash of the whole dict.
            problems: the run's scope.

        Raises:
            StoreError: a run with this name exists.
        """
        from .. import __version__

        exists = StoreError(
            f"a run named {run_name!r} already exists in {self.safe_url}",
            fix="choose another --run-name, or resume it with --resume",
        )
        try:
            with self._write() as s:
                if s.scalar(select(RunRow.id).where(RunRow.run_name == run_name)) is not None:
                    raise exists
                run = RunRow(
                    run_name=run_name,
                    model=model,
                    status=RunStatus.RUNNING.value,
                    created_at=_now(),
                    finished_at=None,
                    protocol_name=str(protocol.get("name", "")),
                    precision=str(protocol.get("precision", "")),
                    protocol_fingerprint=_protocol_fingerprint(protocol),
                    hardware_fingerprint=_hardware_fingerprint(hardware),
                    protocol=dict(protocol),
                    config=dict(config),
                    hardware=dict(hardware),
                    kbench_version=__version__,
                )
                self._set_runner(s, run)
                s.add(run)
                s.flush()
                pks = self._problem_pks(s, problems)
                seen: set[tuple[int, int]] = set()
                for p in problems:
                    if (p.level, p.problem_id) in seen:
                        log.warning("run %s: duplicate problem %s ignored", run_name, p.key)
                        continue
                    seen.add((p.level, p.problem_id))
                    s.add(
                        RunProblemRow(
                            run_id=run.id,
                            problem_pk=pks[p.code_sha256],
                            level=p.level,
                            problem_id=p.problem_id,
                            name=p.name,
                            source=p.source,
                            flags=None,
                        )
                    )
        except IntegrityError:  # a concurrent create_run with the same name won
            raise exists from None

    @staticmethod
    def _set_runner(s: Session, run: RunRow) -> None:
        """Record this process as the run's runner, with a first heartbeat."""
        me = current_runner()
        run.runner_host, run.runner_pid, run.runner_start = me.host, me.pid, me.start
        run.heartbeat_at = _db_now(s)

    @staticmethod
    def _run_by_me(run: RunRow) -> bool:
        """Whether this process is the run's recorded runner."""
        me = current_runner()
        return (run.runner_host, run.runner_pid, run.runner_start) == (me.host, me.pid, me.start)

    @staticmethod
    def _judge(row: RunRow, now: datetime) -> RunnerState:
        return judge_runner(row.runner_host, row.runner_pid, row.runner_start, _aware(row.heartbeat_at), now)

    def _info(self, s: Session, row: RunRow, now: datetime | None = None) -> RunInfo:
        from sqlalchemy import func

        count = s.scalar(
            select(func.count()).select_from(RunProblemRow).where(RunProblemRow.run_id == row.id)
        )
        status, note = row.status, ""
        if row.status == RunStatus.RUNNING.value:
            state = self._judge(row, now or _db_now(s))
            note = state.note
            if not state.alive:
                status = RunStatus.INTERRUPTED.value
        return RunInfo(
            run_name=row.run_name,
            model=row.model,
            status=status,
            created_at=_aware(row.created_at),  # type: ignore[arg-type]
            finished_at=_aware(row.finished_at),
            protocol=dict(row.protocol or {}),
            config=dict(row.config or {}),
            hardware=dict(row.hardware or {}),
            problem_count=int(count or 0),
            protocol_name=row.protocol_name,
            precision=row.precision,
            protocol_fingerprint=row.protocol_fingerprint,
            hardware_fingerprint=row.hardware_fingerprint,
            kbench_version=row.kbench_version,
            status_note=note,
            runner_host=row.runner_host or "",
            runner_pid=row.runner_pid,
            heartbeat_at=_aware(row.heartbeat_at),
        )

    def get_run(self, run_name: str) -> RunInfo | None:
        """The run named ``run_name``, or None. A run stored as ``running`` whose runner is gone reads as
        ``interrupted`` (``status_note`` says why)."""
        with self._read() as s:
            row = s.scalars(select(RunRow).where(RunRow.run_name == run_name)).one_or_none()
            return None if row is None else self._info(s, row)

    def list_runs(self) -> list[RunInfo]:
        """Every run, oldest first (statuses as :meth:`get_run` reads them)."""
        with self._read() as s:
            rows = s.scalars(select(RunRow).order_by(RunRow.created_at, RunRow.id)).all()
            now = _db_now(s)
            return [self._info(s, r, now) for r in rows]

    def run_problems(self, run_name: str) -> list[Problem]:
        """The run's scope (``fast_p``'s denominator), sorted by level, problem_id.

        Raises:
            StoreError: no such run.
        """
        with self._read() as s:
            run = self._run_row(s, run_name)
            rows = s.execute(
                select(RunProblemRow, ProblemRow)
                .join(ProblemRow, RunProblemRow.problem_pk == ProblemRow.id)
                .where(RunProblemRow.run_id == run.id)
                .order_by(RunProblemRow.level, RunProblemRow.problem_id)
            ).all()
            return [
                Problem(
                    level=rp.level,
                    problem_id=rp.problem_id,
                    name=rp.name,
                    code=pr.code,
                    source=rp.source,
                    code_sha256=pr.code_sha256,
                )
                for rp, pr in rows
            ]

    def set_problem_flags(self, run_name: str, flags: Mapping[str, Iterable[str]]) -> None:
        """Store the problem audit's flags for problems of a run's scope.

        Args:
            run_name: the run.
            flags: problem key (``"L2/83"``) -> flags (e.g. ``["degenerate"]``); problems not named
                keep their flags; an empty list clears them.

        Raises:
            StoreError: no such run, or a key that is not in the run's scope.
        """
        with self._write() as s:
            run = self._run_row(s, run_name)
            rows = {
                f"L{r.level}/{r.problem_id}": r
                for r in s.scalars(select(RunProblemRow).where(RunProblemRow.run_id == run.id))
            }
            for key, fl in flags.items():
                if key not in rows:
                    raise StoreError(f"problem {key} is not in run {run_name!r}")
                rows[key].flags = sorted(set(fl)) or None

    def problem_flags(self, run_name: str) -> dict[str, list[str]]:
        """Problem key -> audit flags, for the problems of a run that have any."""
        with self._read() as s:
            run = self._run_row(s, run_name)
            return {
                f"L{r.level}/{r.problem_id}": list(r.flags)
                for r in s.scalars(select(RunProblemRow).where(RunProblemRow.run_id == run.id))
                if r.flags
            }

    def set_run_status(self, run_name: str, status: str, *, hardware: dict[str, Any] | None = None,
                       if_runner: bool = False) -> bool:
        """Set a run's status (``running | finished | interrupted | failed``).

        ``finished`` sets ``finished_at``; ``hardware``, when given, replaces the stored
        fingerprint (e.g. clocks read at the end of the run). ``running`` records this process as the run's
        runner without asking whether another one runs it (:meth:`claim_run` asks).

        Args:
            if_runner: write only while this process is the run's recorded runner (a runner ending): one taken
                as gone and superseded by a resume must not mark the new runner's run finished or interrupted
                (an interrupted one could be claimed by a third runner while the second still runs it).

        Returns:
            False when ``if_runner`` and another process runs the run now (nothing written); True otherwise.

        Raises:
            StoreError: no such run.
            ConfigError: an unknown status.
        """
        try:
            st = RunStatus(status)
        except ValueError:
            raise ConfigError(
                f"unknown run status {status!r}", fix=f"use one of: {', '.join(s.value for s in RunStatus)}"
            ) from None
        with self._write() as s:
            run = self._run_row(s, run_name)
            if if_runner:
                if not self._run_by_me(run):
                    log.warning("run %s is run by pid %s on %s now; its status is left to that runner", run_name,
                                run.runner_pid, run.runner_host)
                    return False
            run.status = st.value
            run.finished_at = _now() if st is RunStatus.FINISHED else None
            if st is RunStatus.RUNNING:
                self._set_runner(s, run)
            if hardware is not None:
                run.hardware = dict(hardware)
                run.hardware_fingerprint = _hardware_fingerprint(hardware)
        return True

    def claim_run(self, run_name: str, *, check_only: bool = False) -> None:
        """Make this process the runner of a run (status ``running``, a first heartbeat), unless another
        runner still runs it (:mod:`.liveness`): in one transaction, so of two processes that resume a run at
        once, one gets it and the other is refused.

        Args:
            run_name: the run.
            check_only: only raise as a claim would; write nothing.

        Raises:
            StoreError: no such run, or its runner still runs (the message names it and the fix: wait for it,
                or stop it; for a runner on another host, how long its heartbeat has been silent and when it
                counts as gone).
        """
        with self._write() as s:
            q = select(RunRow).where(RunRow.run_name == run_name)
            if s.get_bind().dialect.name == "postgresql":
                q = q.with_for_update()  # SQLite's BEGIN IMMEDIATE already holds the database's write lock
            run = s.scalars(q).one_or_none()
            if run is None:
                raise StoreError(f"no run named {run_name!r} in this store", fix="see `kbench runs list`")
            if run.status == RunStatus.RUNNING.value and not self._run_by_me(run):
                state = self._judge(run, _db_now(s))
                if state.alive:
                    raise self._busy_error(run, state)
            if not check_only:
                run.status = RunStatus.RUNNING.value
                run.finished_at = None
                self._set_runner(s, run)

    def _busy_error(self, run: RunRow, state: RunnerState) -> StoreError:
        """The refusal of a second runner for a run whose runner still runs (``state``: its judgement)."""
        again = "a second runner would evaluate its candidates again beside it"
        if state.local:
            return StoreError(
                f"run {run.run_name!r} in {self.safe_url} is still being run by pid {run.runner_pid} on this host "
                f"({run.runner_host}); {again}",
                fix=f"wait for it to end, or stop it (Ctrl-C in its terminal, or kill {run.runner_pid}) and resume "
                "again",
            )
        left = max(0.0, STALE_AFTER_S - (state.heartbeat_age_s or 0.0))
        return StoreError(
            f"run {run.run_name!r} in {self.safe_url} is still being run by pid {run.runner_pid} on "
            f"{run.runner_host}, another host (last heartbeat {format_duration(state.heartbeat_age_s)} ago); {again}",
            fix=f"wait for it to end, or stop it on {run.runner_host} (Ctrl-C, or kill {run.runner_pid}); if that "
            f"host is down, resume once the run has had no heartbeat for {format_duration(STALE_AFTER_S)} (in "
            f"{format_duration(left)})",
        )

    def heartbeat(self, run_name: str) -> bool:
        """Write this runner's heartbeat for the run (:class:`.liveness.Heartbeat` calls it).

        Returns:
            False, writing nothing, when the run is recorded as run by another process now (it was taken
            as gone and resumed elsewhere), or no longer exists; True otherwise.
        """
        with self._write() as s:
            run = s.scalars(select(RunRow).where(RunRow.run_name == run_name)).one_or_none()
            if run is None or not self._run_by_me(run):
                return False
            run.heartbeat_at = _db_now(s)
            return True

    # -- samples, attempts, results --------------------------------------------------------------

    def done_attempts(self, run_name: str) -> set[tuple[int, int, str, int, int]]:
        """``(level, problem_id, model, sample_id, turn)`` of every recorded attempt (for resume).

        Raises:
            StoreError: no such run.
        """
        with self._read() as s:
            run = self._run_row(s, run_name)
            rows = s.execute(
                select(
                    SampleRow.level,
                    SampleRow.problem_id,
                    SampleRow.model,
                    SampleRow.sample_id,
                    AttemptRow.turn,
                )
                .join(AttemptRow, AttemptRow.sample_pk == SampleRow.id)
                .where(SampleRow.run_id == run.id)
            ).all()
            return {(int(a), int(b), str(c), int(d), int(e)) for a, b, c, d, e in rows}

    #: how many times ``--resume`` evaluates a turn stored as a harness error again (``extra.retries`` counts
    #: them): a candidate that provokes one (holding device memory, killing its worker) gets no endless loop
    MAX_HARNESS_RETRIES = 2

    def retryable_attempts(self, run_name: str) -> dict[tuple[int, int, str, int, int], dict[str, Any]]:
        """Recorded turns that failed for a reason not the candidate's, to evaluate again on resume: a
        generation error (the provider's request failed) or a harness error (``extra.harness_error``: a
        device worker that died, the trusted side out of memory) evaluated again fewer than
        :attr:`MAX_HARNESS_RETRIES` times (``extra.retries``). Keyed like :meth:`done_attempts`; each
        value is ``{"outcome": ..., "error": ...}`` of the stored verdict (first 2000 characters).

        Raises:
            StoreError: no such run.
        """
        with self._read() as s:
            run = self._run_row(s, run_name)
            rows = s.execute(
                select(SampleRow.level, SampleRow.problem_id, SampleRow.model, SampleRow.sample_id, AttemptRow.turn,
                       ResultRow.outcome, ResultRow.error, ResultRow.extra)
                .join(AttemptRow, AttemptRow.sample_pk == SampleRow.id)
                .join(ResultRow, ResultRow.attempt_pk == AttemptRow.id)
                .where(SampleRow.run_id == run.id)
            ).all()
        out: dict[tuple[int, int, str, int, int], dict[str, Any]] = {}
        for lv, pid, model, sid, turn, outcome, error, extra in rows:
            harness = isinstance(extra, dict) and bool(extra.get("harness_error"))
            if harness and int(extra.get("retries") or 0) >= self.MAX_HARNESS_RETRIES:
                continue  # evaluated again that often already: the failure stays (a candidate could cause it)
            if outcome == str(Outcome.GENERATION_ERROR) or harness:
                out[(int(lv), int(pid), str(model), int(sid), int(turn))] = {"outcome": outcome,
                                                                              "error": (error or "")[:2000]}
        return out

    def discard_attempts_from(self, run_name: str, level: int, problem_id: int, model: str, sample_id: int,
                              turn: int) -> list[dict[str, Any]]:
        """Delete a sample's recorded turns from ``turn`` on (their results and timings too). A resumed run
        replaces them through :meth:`record_attempt`'s ``replace_from_turn`` instead, in the transaction
        that stores the new turn. Returns the deleted turns' summaries (:meth:`_discard_from`).

        Raises:
            StoreError: no such run.
        """
        with self._write() as s:
            run = self._run_row(s, run_name)
            sample = s.scalars(select(SampleRow).where(
                SampleRow.run_id == run.id, SampleRow.level == level, SampleRow.problem_id == problem_id,
                SampleRow.model == model, SampleRow.sample_id == sample_id)).one_or_none()
            return [] if sample is None else self._discard_from(s, sample.id, turn)

    @staticmethod
    def _discard_from(s: Session, sample_pk: int, turn: int) -> list[dict[str, Any]]:
        """Delete the sample's turns from ``turn`` on, children first (whether or not the database
        cascades). Returns, per deleted turn, ``turn``, ``outcome``, ``error`` (first 500 characters), what
        its generation cost (``input_tokens``, ``output_tokens``, ``cost_usd``), whether it was a harness
        error (``harness_error``) and how often the turn's harness errors were evaluated again (``retries``)."""
        rows = s.execute(
            select(AttemptRow.id, AttemptRow.turn, AttemptRow.input_tokens, AttemptRow.output_tokens,
                   AttemptRow.cost_usd, ResultRow.outcome, ResultRow.error, ResultRow.extra)
            .join(ResultRow, ResultRow.attempt_pk == AttemptRow.id, isouter=True)
            .where(AttemptRow.sample_pk == sample_pk, AttemptRow.turn >= turn)
            .order_by(AttemptRow.turn)
        ).all()
        ids = [r[0] for r in rows]
        if ids:
            rids = select(ResultRow.id).where(ResultRow.attempt_pk.in_(ids)).scalar_subquery()
            s.execute(delete(TimingRow).where(TimingRow.result_pk.in_(rids)))
            s.execute(delete(ResultRow).where(ResultRow.attempt_pk.in_(ids)))
            s.execute(delete(AttemptRow).where(AttemptRow.id.in_(ids)))
        return [{"turn": int(t), "outcome": outcome, "error": (error or "")[:500], "input_tokens": it,
                 "output_tokens": ot, "cost_usd": cost,
                 "retries": int(extra.get("retries") or 0) if isinstance(extra, dict) else 0,
                 "harness_error": bool(isinstance(extra, dict) and extra.get("harness_error"))}
                for _id, t, it, ot, cost, outcome, error, extra in rows]

    def attempts_for_sample(
        self, run_name: str, level: int, problem_id: int, model: str, sample_id: int
    ) -> list[AttemptRecord]:
        """Every recorded turn of one sample, by turn (to resume a multi-turn sample).

        Raises:
            StoreError: no such run.
        """
        with self._read() as s:
            run = self._run_row(s, run_name)
            rows = s.execute(
                select(SampleRow, AttemptRow, ResultRow)
                .join(AttemptRow, AttemptRow.sample_pk == SampleRow.id)
                .join(ResultRow, ResultRow.attempt_pk == AttemptRow.id)
                .where(
                    SampleRow.run_id == run.id,
                    SampleRow.level == level,
                    SampleRow.problem_id == problem_id,
                    SampleRow.model == model,
                    SampleRow.sample_id == sample_id,
                )
                .order_by(AttemptRow.turn)
            ).all()
            return [self._attempt_record(sm, at, rs) for sm, at, rs in rows]

    @staticmethod
    def _attempt_record(sm: SampleRow, at: AttemptRow, rs: ResultRow) -> AttemptRecord:
        generation = {
            "text": at.reply or "",
            "code": at.code,
            "model": at.generation_model or sm.model,
            "input_tokens": at.input_tokens,
            "output_tokens": at.output_tokens,
            "cached_tokens": at.cached_tokens,
            "reasoning_tokens": at.reasoning_tokens,
            "latency_s": at.latency_s,
            "cost_usd": at.cost_usd,
            "error": at.generation_error or "",
            "error_kind": at.generation_error_kind or "",
            "attempts": at.generation_requests,
        }
        return AttemptRecord(
            turn=at.turn,
            messages=at.messages,
            reply=at.reply,
            code=at.code,
            result=_result_from_json(rs.result),
            backend=at.backend,
            generation=generation,
            level=sm.level,
            problem_id=sm.problem_id,
            model=sm.model,
            sample_id=sm.sample_id,
            attempt_id=at.id,
            result_id=rs.id,
            created_at=_aware(at.created_at),
        )

    def record_attempt(
        self,
        run_name: str,
        *,
        problem: Problem,
        candidate: Candidate | None,
        model: str,
        sample_id: int,
        turn: int,
        messages: list[dict[str, Any]] | None,
        reply: str | None,
        generation: Mapping[str, Any] | None,
        result: EvalResult,
        replace_from_turn: int | None = None,
    ) -> int:
        """Record one evaluated turn in one transaction.

        Upserts the sample, inserts the attempt (prompt messages, reply, code, backend, tokens, cost,
        latency, generation error), the result (every :class:`EvalResult` field as a column and the
        full result as JSON) and one timing row with the candidate's raw trial times.

        Args:
            run_name: the run.
            problem: the problem answered (added to the run's scope with a warning if absent).
            candidate: the evaluated candidate, or None when the reply held no code or generation failed.
            model: model name stored with the sample.
            sample_id: the sample (what pass@k counts).
            turn: refinement step from 0.
            messages: prompt messages sent for this turn, or None (replay).
            reply: the reply text, or None (then ``generation["text"]`` when given).
            generation: the fields of ``adapters.base.Generation`` as a dict (or the dataclass), or None.
            result: the verdict.
            replace_from_turn: a resumed run evaluating again what failed for a reason not the candidate's:
                the sample's recorded turns from this one on are deleted in the same transaction, and their
                summaries go into this result's ``extra["earlier_attempt"]`` (``outcome`` and ``error`` of
                the first, ``replaced_turns`` for each, with what its generation cost).

        Returns:
            The stored result's id (``results_frame``'s ``result_id``). Idempotent on
            (run, level, problem_id, model, sample_id, turn): a second call stores nothing and
            returns the id recorded first.

        Raises:
            StoreError: no such run.
        """
        gen = _generation_dict(generation)
        for attempt in range(3):
            try:
                with self._write() as s:
                    return self._record(
                        s, run_name, problem, candidate, model, sample_id, turn, messages, reply, gen, result,
                        replace_from_turn,
                    )
            except IntegrityError:  # a concurrent writer inserted the same sample or turn: look again
                if attempt == 2:
                    raise
                log.debug(
                    "record_attempt race on %s %s sample %s turn %s; retrying",
                    run_name,
                    problem.key,
                    sample_id,
                    turn,
                )
        raise AssertionError("unreachable")

    def _record(
        self,
        s: Session,
        run_name: str,
        problem: Problem,
        candidate: Candidate | None,
        model: str,
        sample_id: int,
        turn: int,
        messages: list[dict[str, Any]] | None,
        reply: str | None,
        gen: dict[str, Any],
        result: EvalResult,
        replace_from_turn: int | None = None,
    ) -> int:
        run = self._run_row(s, run_name)
        sample = s.scalars(
            select(SampleRow).where(
                SampleRow.run_id == run.id,
                SampleRow.level == problem.level,
                SampleRow.problem_id == problem.problem_id,
                SampleRow.model == model,
                SampleRow.sample_id == sample_id,
            )
        ).one_or_none()
        now = _now()
        if sample is not None and replace_from_turn is not None:
            replaced = self._discard_from(s, sample.id, replace_from_turn)
            if replaced:
                first = replaced[0]
                # harness errors evaluated again so far (a generation error's retry does not count)
                retries = first["retries"] + (1 if first["harness_error"] else 0)
                result = result.with_(extra={**result.extra, "retries": retries, "earlier_attempt": {
                    "outcome": first["outcome"], "error": first["error"], "replaced_turns": replaced}})
        if sample is not None:
            existing = s.execute(
                select(ResultRow.id)
                .join(AttemptRow, ResultRow.attempt_pk == AttemptRow.id)
                .where(AttemptRow.sample_pk == sample.id, AttemptRow.turn == turn)
            ).scalar()
            if existing is not None:
                return int(existing)
        else:
            problem_pk = self._problem_pks(s, [problem])[problem.code_sha256]
            in_scope = s.scalar(
                select(RunProblemRow.id).where(
                    RunProblemRow.run_id == run.id,
                    RunProblemRow.level == problem.level,
                    RunProblemRow.problem_id == problem.problem_id,
                )
            )
            if in_scope is None:
                log.warning("run %s: problem %s was not in the run's scope; adding it", run_name, problem.key)
                s.add(
                    RunProblemRow(
                        run_id=run.id,
                        problem_pk=problem_pk,
                        level=problem.level,
                        problem_id=problem.problem_id,
                        name=problem.name,
                        source=problem.source,
                        flags=None,
                    )
                )
            sample = SampleRow(
                run_id=run.id,
                problem_pk=problem_pk,
                level=problem.level,
                problem_id=problem.problem_id,
                model=model,
                sample_id=sample_id,
                created_at=now,
            )
            s.add(sample)
            s.flush()
        code = candidate.source if candidate is not None else gen.get("code")
        if reply is None and gen.get("text"):
            reply = str(gen["text"])
        at = AttemptRow(
            sample_pk=sample.id,
            turn=turn,
            messages=[dict(m) for m in messages] if messages is not None else None,
            reply=reply,
            code=code,
            code_sha256=hashlib.sha256(code.encode()).hexdigest() if code else None,
            backend=str(candidate.backend) if candidate is not None else "none",
            generation_model=gen.get("model"),
            input_tokens=gen.get("input_tokens"),
            output_tokens=gen.get("output_tokens"),
            cached_tokens=gen.get("cached_tokens"),
            reasoning_tokens=gen.get("reasoning_tokens"),
            cost_usd=gen.get("cost_usd"),
            latency_s=gen.get("latency_s"),
            generation_error=gen.get("error") or None,
            generation_error_kind=gen.get("error_kind") or None,
            generation_requests=gen.get("attempts"),
            created_at=now,
        )
        s.add(at)
        s.flush()
        rd = result.to_dict()
        rs = ResultRow(
            attempt_pk=at.id,
            outcome=str(result.outcome),
            tag=result.tag,
            compiled=bool(result.compiled),
            correct=bool(result.correct),
            has_speedup=result.has_speedup,
            max_abs_err=result.max_abs_err,
            max_rel_err=result.max_rel_err,
            allclose_kernelbench=result.allclose_kernelbench,
            candidate_ms=result.candidate_ms,
            eager_ms=result.eager_ms,
            compile_ms=result.compile_ms,
            speedup_eager=result.speedup_eager,
            speedup_compile=result.speedup_compile,
            baseline_id=result.baseline_id,
            findings=rd["findings"],
            error=result.error or "",
            log=result.log or "",
            phase_s=rd["phase_s"],
            device=result.device or "",
            extra=rd["extra"],
            result=rd,
            created_at=now,
        )
        s.add(rs)
        s.flush()
        if result.candidate is not None:
            s.add(TimingRow(result_pk=rs.id, role="candidate", **_stats_columns(result.candidate)))
        return int(rs.id)

    def results_frame(self, run_name: str) -> pd.DataFrame:
        """One row per recorded attempt of a run, columns :data:`RESULT_COLUMNS`.

        Columns: level, problem_id, name, problem_sha256, model, sample_id, turn, backend, outcome,
        tag, compiled, correct (outputs matched, as the evaluator judged), passed (outcome is
        correct, policy or timing_invalid), has_speedup (``EvalResult.has_speedup``), max_abs_err,
        max_rel_err, allclose_kernelbench, candidate_ms, eager_ms, compile_ms (ms), speedup_eager,
        speedup_compile (None unless has_speedup), baselines_ms (dict mode -> ms: eager and the
        protocol's compile mode, plus any mode in ``EvalResult.extra["baselines"]`` (TimingStats
        dicts) or ``extra["baselines_ms"]``, e.g. ``{"eager": 1.2, "compile:max-autotune": 0.9}``),
        problem_flags (``extra["problem_flags"]`` from the evaluator),
        input_tokens, output_tokens, cached_tokens, reasoning_tokens, cost_usd, latency_s (s),
        generation_error, findings (list of Finding dicts), error, code, device, created_at,
        attempt_id, result_id. Sorted by level, problem_id, model, sample_id, turn.

        Raises:
            StoreError: no such run.
        """
        with self._read() as s:
            run = self._run_row(s, run_name)
            names = {
                (r.level, r.problem_id): r.name
                for r in s.scalars(select(RunProblemRow).where(RunProblemRow.run_id == run.id))
            }
            compile_mode = str((run.protocol or {}).get("compile_mode", "default"))
            protocol_name = str((run.protocol or {}).get("name", ""))
            protocol_fp = _protocol_fingerprint(run.protocol or {})
            rows = s.execute(
                select(SampleRow, AttemptRow, ResultRow, ProblemRow.code_sha256)
                .join(AttemptRow, AttemptRow.sample_pk == SampleRow.id)
                .join(ResultRow, ResultRow.attempt_pk == AttemptRow.id)
                .join(ProblemRow, ProblemRow.id == SampleRow.problem_pk)
                .where(SampleRow.run_id == run.id)
                .order_by(
                    SampleRow.level,
                    SampleRow.problem_id,
                    SampleRow.model,
                    SampleRow.sample_id,
                    AttemptRow.turn,
                )
            ).all()
            records = []
            for sm, at, rs, sha in rows:
                extra = rs.extra or {}
                base: dict[str, float | None] = {
                    "eager": rs.eager_ms,
                    f"compile:{compile_mode}": rs.compile_ms,
                }
                for mode, st in (extra.get("baselines") or {}).items():
                    if base.get(str(mode)) is None:
                        base[str(mode)] = _baseline_value(st)
                for mode, ms in (extra.get("baselines_ms") or {}).items():
                    base[str(mode)] = _jsonsafe.restore_float(ms)
                records.append(
                    {
                        "level": sm.level,
                        "problem_id": sm.problem_id,
                        "name": names.get((sm.level, sm.problem_id), ""),
                        "problem_sha256": sha,
                        "protocol": protocol_name,
                        "protocol_fingerprint": protocol_fp,
                        "model": sm.model,
                        "sample_id": sm.sample_id,
                        "turn": at.turn,
                        "backend": at.backend,
                        "outcome": rs.outcome,
                        "tag": rs.tag,
                        "compiled": rs.compiled,
                        "correct": rs.correct,
                        "passed": rs.outcome in _PASSED,
                        "has_speedup": rs.has_speedup,
                        "max_abs_err": _jsonsafe.restore_float(rs.result.get("max_abs_err")),
                        "max_rel_err": _jsonsafe.restore_float(rs.result.get("max_rel_err")),
                        "allclose_kernelbench": rs.allclose_kernelbench,
                        "candidate_ms": rs.candidate_ms,
                        "eager_ms": rs.eager_ms,
                        "compile_ms": rs.compile_ms,
                        "speedup_eager": rs.speedup_eager,
                        "speedup_compile": rs.speedup_compile,
                        "baselines_ms": {k: v for k, v in base.items() if v is not None},
                        "problem_flags": [str(x) for x in extra.get("problem_flags") or ()],
                        "input_tokens": at.input_tokens,
                        "output_tokens": at.output_tokens,
                        "cached_tokens": at.cached_tokens,
                        "reasoning_tokens": at.reasoning_tokens,
                        "cost_usd": at.cost_usd,
                        "latency_s": at.latency_s,
                        "generation_error": at.generation_error,
                        "findings": list(rs.findings or []),
                        "error": rs.error,
                        "code": at.code,
                        "device": rs.device,
                        "created_at": _aware(rs.created_at),
                        "attempt_id": at.id,
                        "result_id": rs.id,
                    }
                )
        df = pd.DataFrame.from_records(records, columns=list(RESULT_COLUMNS))
        for col in ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"):
            df[col] = df[col].astype("Int64")
        return df

    def attempt(self, result_id: int) -> AttemptRecord | None:
        """The attempt whose result has id ``result_id``, or None."""
        with self._read() as s:
            row = s.execute(
                select(SampleRow, AttemptRow, ResultRow)
                .join(AttemptRow, AttemptRow.sample_pk == SampleRow.id)
                .join(ResultRow, ResultRow.attempt_pk == AttemptRow.id)
                .where(ResultRow.id == result_id)
            ).one_or_none()
            return None if row is None else self._attempt_record(*row)

    def attempts(self, run_name: str) -> list[AttemptRecord]:
        """Every recorded attempt of a run with its messages, reply and result, in
        (level, problem_id, model, sample_id, turn) order.

        Raises:
            StoreError: no such run.
        """
        with self._read() as s:
            run = self._run_row(s, run_name)
            rows = s.execute(
                select(SampleRow, AttemptRow, ResultRow)
                .join(AttemptRow, AttemptRow.sample_pk == SampleRow.id)
                .join(ResultRow, ResultRow.attempt_pk == AttemptRow.id)
                .where(SampleRow.run_id == run.id)
                .order_by(
                    SampleRow.level,
                    SampleRow.problem_id,
                    SampleRow.model,
                    SampleRow.sample_id,
                    AttemptRow.turn,
                )
            ).all()
            return [self._attempt_record(*r) for r in rows]

    def timing_samples(self, result_id: int) -> TimingStats | None:
        """The candidate timing (with raw trial times, ms) stored for a result, or None."""
        with self._read() as s:
            row = s.scalars(
                select(TimingRow).where(TimingRow.result_pk == result_id, TimingRow.role == "candidate")
            ).first()
            return None if row is None else _stats_from_row(row)

    # -- baselines ---------------------------------------------------------------------------------

    @staticmethod
    def _baseline_record(row: BaselineRow) -> BaselineRecord:
        return BaselineRecord(
            id=row.id,
            problem_sha256=row.problem_sha256,
            level=row.level,
            problem_id=row.problem_id,
            name=row.name,
            hardware_fingerprint=row.hardware_fingerprint,
            software_fingerprint=row.software_fingerprint,
            protocol_fingerprint=row.protocol_fingerprint,
            precision=row.precision,
            mode=row.mode,
            stats=_stats_from_row(row),
            hardware=dict(row.hardware or {}),
            measured_here=row.measured_here,
            source=row.source,
            created_at=_aware(row.created_at),
        )

    def find_baseline(
        self,
        *,
        problem_sha256: str,
        hardware_fingerprint: str,
        software_fingerprint: str,
        protocol_fingerprint: str,
        precision: str,
        mode: str,
        measured_here: bool | None = None,
    ) -> BaselineRecord | None:
        """The newest baseline stored under exactly this key, or None (no approximate matches).
        With ``measured_here`` set, only baselines measured here (True) or imported ones (False) match.

        Args:
            problem_sha256: ``Problem.code_sha256``.
            hardware_fingerprint, software_fingerprint, protocol_fingerprint: as measured.
            precision: ``fp32`` | ``fp16`` | ``bf16``.
            mode: ``"eager"`` or ``"compile:<mode>"``.
        """
        with self._read() as s:
            row = s.scalars(
                select(BaselineRow)
                .where(
                    BaselineRow.problem_sha256 == problem_sha256,
                    BaselineRow.hardware_fingerprint == hardware_fingerprint,
                    BaselineRow.software_fingerprint == software_fingerprint,
                    BaselineRow.protocol_fingerprint == protocol_fingerprint,
                    BaselineRow.precision == precision,
                    BaselineRow.mode == mode,
                    *([BaselineRow.measured_here == measured_here] if measured_here is not None else []),
                )
                .order_by(BaselineRow.id.desc())
                .limit(1)
            ).first()
            return None if row is None else self._baseline_record(row)

    def put_baseline(
        self,
        *,
        problem: Problem,
        hardware_fingerprint: str,
        software_fingerprint: str,
        protocol_fingerprint: str,
        precision: str,
        mode: str,
        stats: TimingStats,
        hardware: dict[str, Any],
        measured_here: bool = True,
        source: str = "measured",
    ) -> int:
        """Store one baseline timing; a later one under the same key supersedes it in :meth:`find_baseline`.

        Args:
            problem: the problem timed.
            hardware_fingerprint, software_fingerprint, protocol_fingerprint, precision, mode: the key
                (``mode`` is ``"eager"`` or ``"compile:<mode>"``).
            stats: the timing (ms).
            hardware: description of the hardware it was measured on.
            measured_here: False for imported numbers.
            source: ``"measured"`` or ``"imported:<hardware>"``.

        Returns:
            The baseline's id.
        """
        item = {
            "problem": problem,
            "hardware_fingerprint": hardware_fingerprint,
            "software_fingerprint": software_fingerprint,
            "protocol_fingerprint": protocol_fingerprint,
            "precision": precision,
            "mode": mode,
            "stats": stats,
            "hardware": hardware,
            "measured_here": measured_here,
            "source": source,
        }
        return self.put_baselines([item])[0]

    def put_baselines(self, items: Iterable[Mapping[str, Any]]) -> list[int]:
        """Store several baselines in one transaction (each item holds :meth:`put_baseline`'s arguments).

        Returns:
            Their ids, in order.
        """
        items = list(items)
        with self._write() as s:
            pks = self._problem_pks(s, [it["problem"] for it in items])
            rows = []
            for it in items:
                problem: Problem = it["problem"]
                row = BaselineRow(
                    problem_pk=pks[problem.code_sha256],
                    problem_sha256=problem.code_sha256,
                    level=problem.level,
                    problem_id=problem.problem_id,
                    name=problem.name,
                    hardware_fingerprint=it["hardware_fingerprint"],
                    software_fingerprint=it["software_fingerprint"],
                    protocol_fingerprint=it["protocol_fingerprint"],
                    precision=it["precision"],
                    mode=it["mode"],
                    hardware=dict(it.get("hardware") or {}),
                    measured_here=bool(it.get("measured_here", True)),
                    source=str(it.get("source", "measured")),
                    created_at=_now(),
                    **_stats_columns(it["stats"]),
                )
                s.add(row)
                rows.append(row)
            s.flush()
            return [int(r.id) for r in rows]

    def baselines(self, **filters: Any) -> list[BaselineRecord]:
        """Stored baselines matching ``filters`` (see :meth:`baselines_frame`), oldest first."""
        with self._read() as s:
            q = select(BaselineRow).order_by(BaselineRow.id)
            for k, v in filters.items():
                if k not in _BASELINE_FILTERS:
                    raise ConfigError(
                        f"cannot filter baselines by {k!r}", fix=f"use {', '.join(_BASELINE_FILTERS)}"
                    )
                col = getattr(BaselineRow, k)
                q = q.where(col.in_(list(v)) if isinstance(v, (list, tuple, set, frozenset)) else col == v)
            return [self._baseline_record(r) for r in s.scalars(q)]

    def baselines_frame(self, **filters: Any) -> pd.DataFrame:
        """Stored baselines as a DataFrame, one row per measurement.

        Args:
            **filters: column = value (or a list of values) for any of problem_sha256, level,
                problem_id, name, hardware_fingerprint, software_fingerprint, protocol_fingerprint,
                precision, mode, measured_here, source.

        Returns:
            Columns: id, level, problem_id, name, problem_sha256, hardware_fingerprint,
            software_fingerprint, protocol_fingerprint, precision, mode, value_ms, median_ms, mean_ms,
            std_ms, min_ms, max_ms, ci95_low_ms, ci95_high_ms, n, timer, statistic, measured_here,
            source, hardware, created_at.

        Raises:
            ConfigError: an unknown filter name.
        """
        cols = [
            "id",
            "level",
            "problem_id",
            "name",
            "problem_sha256",
            "hardware_fingerprint",
            "software_fingerprint",
            "protocol_fingerprint",
            "precision",
            "mode",
            "value_ms",
            "median_ms",
            "mean_ms",
            "std_ms",
            "min_ms",
            "max_ms",
            "ci95_low_ms",
            "ci95_high_ms",
            "n",
            "timer",
            "statistic",
            "measured_here",
            "source",
            "hardware",
            "created_at",
        ]
        recs = []
        for b in self.baselines(**filters):
            st = b.stats
            recs.append(
                {
                    "id": b.id,
                    "level": b.level,
                    "problem_id": b.problem_id,
                    "name": b.name,
                    "problem_sha256": b.problem_sha256,
                    "hardware_fingerprint": b.hardware_fingerprint,
                    "software_fingerprint": b.software_fingerprint,
                    "protocol_fingerprint": b.protocol_fingerprint,
                    "precision": b.precision,
                    "mode": b.mode,
                    "value_ms": st.value_ms,
                    "median_ms": st.median_ms,
                    "mean_ms": st.mean_ms,
                    "std_ms": st.std_ms,
                    "min_ms": st.min_ms,
                    "max_ms": st.max_ms,
                    "ci95_low_ms": st.ci95_low_ms,
                    "ci95_high_ms": st.ci95_high_ms,
                    "n": st.n,
                    "timer": st.timer,
                    "statistic": st.statistic,
                    "measured_here": b.measured_here,
                    "source": b.source,
                    "hardware": b.hardware,
                    "created_at": b.created_at,
                }
            )
        return pd.DataFrame.from_records(recs, columns=cols)

    # -- maintenance -------------------------------------------------------------------------------

    def table_names(self) -> list[str]:
        """Tables present in the database (for diagnostics and tests)."""
        return sorted(inspect(self._engine).get_table_names())


def _protocol_fingerprint(protocol: Mapping[str, Any]) -> str:
    """The stored protocol's fingerprint (``Protocol.fingerprint`` of the dict kept with the run)."""
    try:
        from ..protocols import Protocol

        return Protocol.from_dict(dict(protocol)).fingerprint()
    except Exception:  # a protocol dict from another version: hash what is there
        import hashlib
        import json

        return hashlib.sha256(json.dumps(protocol, sort_keys=True, default=str).encode()).hexdigest()[:16]
