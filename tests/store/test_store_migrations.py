"""Schema migrations: a DB built at the first revision is upgraded to head without loss, the migrated
schema matches the models, and a run killed mid-write leaves a consistent store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text

from kernelbench_harness.core import Outcome
from kernelbench_harness.store import Store, upgrade_schema
from kernelbench_harness.store.models import Base

_NOW = "2026-03-01 12:00:00"


def _insert_rev1_rows(url: str) -> None:
    """Rows written the way kbench at revision 0001 wrote them (plain SQL, no ORM of today)."""
    engine = Store._make_engine(url)
    stats = dict(
        timer="cuda_events",
        statistic="median",
        n=3,
        value_ms=0.5,
        median_ms=0.5,
        mean_ms=0.51,
        std_ms=0.01,
        min_ms=0.49,
        max_ms=0.52,
        ci95_low_ms=0.495,
        ci95_high_ms=0.505,
        samples_ms=json.dumps([0.49, 0.5, 0.52]),
    )
    result = {
        "outcome": "correct",
        "tag": "",
        "compiled": True,
        "correct": True,
        "max_abs_err": 1e-6,
        "max_rel_err": 1e-6,
        "allclose_kernelbench": None,
        "candidate": {
            "median_ms": 0.5,
            "mean_ms": 0.51,
            "std_ms": 0.01,
            "min_ms": 0.49,
            "max_ms": 0.52,
            "ci95_low_ms": 0.495,
            "ci95_high_ms": 0.505,
            "n": 3,
            "samples_ms": [0.49, 0.5, 0.52],
            "timer": "cuda_events",
            "statistic": "median",
        },
        "eager_ms": 1.0,
        "compile_ms": 2.0,
        "baseline_id": None,
        "findings": [],
        "error": "",
        "log": "",
        "phase_s": {},
        "device": "cuda:0",
        "extra": {},
    }
    with engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO runs (id, run_name, model, status, created_at, finished_at, protocol_name, precision, "
                "protocol_fingerprint, hardware_fingerprint, protocol, config, hardware, kbench_version) VALUES "
                "(1, 'old-run', 'old-model', 'finished', :now, :now, 'kbench', 'fp32', 'pfp', 'hfp', :proto, "
                "'{}', :hw, '0.0.9')"
            ),
            {
                "now": _NOW,
                "proto": json.dumps({"name": "kbench", "precision": "fp32"}),
                "hw": json.dumps({"device_name": "NVIDIA H200"}),
            },
        )
        c.execute(
            text("INSERT INTO problems (id, code_sha256, code) VALUES (1, :sha, '# code')"), {"sha": "a" * 64}
        )
        c.execute(
            text(
                "INSERT INTO run_problems (id, run_id, problem_pk, level, problem_id, name, source) VALUES "
                "(1, 1, 1, 1, 4, 'Matmul', 'old/level1/4_Matmul.py')"
            )
        )
        c.execute(
            text(
                "INSERT INTO samples (id, run_id, problem_pk, level, problem_id, model, sample_id, created_at) "
                "VALUES (1, 1, 1, 1, 4, 'old-model', 0, :now)"
            ),
            {"now": _NOW},
        )
        c.execute(
            text(
                "INSERT INTO attempts (id, sample_pk, turn, messages, reply, code, code_sha256, backend, "
                "created_at) VALUES (1, 1, 0, :msgs, 'the reply', 'class ModelNew: pass', NULL, 'cuda', :now)"
            ),
            {"msgs": json.dumps([{"role": "user", "content": "hi"}]), "now": _NOW},
        )
        c.execute(
            text(
                "INSERT INTO results (id, attempt_pk, outcome, tag, compiled, correct, has_speedup, max_abs_err, "
                "candidate_ms, eager_ms, compile_ms, speedup_eager, speedup_compile, findings, error, log, "
                "phase_s, device, extra, result, created_at) VALUES (1, 1, 'correct', '', TRUE, TRUE, TRUE, "
                "1e-6, 0.5, 1.0, 2.0, 2.0, 4.0, '[]', '', '', '{}', 'cuda:0', '{}', :res, :now)"
            ),
            {"res": json.dumps(result), "now": _NOW},
        )
        c.execute(
            text(
                "INSERT INTO timings (id, result_pk, role, timer, statistic, n, value_ms, median_ms, mean_ms, "
                "std_ms, min_ms, max_ms, ci95_low_ms, ci95_high_ms, samples_ms) VALUES (1, 1, 'candidate', "
                ":timer, :statistic, :n, :value_ms, :median_ms, :mean_ms, :std_ms, :min_ms, :max_ms, "
                ":ci95_low_ms, :ci95_high_ms, :samples_ms)"
            ),
            stats,
        )
        c.execute(
            text(
                "INSERT INTO baselines (id, problem_pk, problem_sha256, level, problem_id, name, "
                "hardware_fingerprint, software_fingerprint, protocol_fingerprint, precision, mode, timer, "
                "statistic, n, value_ms, median_ms, mean_ms, std_ms, min_ms, max_ms, ci95_low_ms, ci95_high_ms, "
                "samples_ms, hardware, measured_here, source, created_at) VALUES (1, 1, :sha, 1, 4, 'Matmul', "
                "'hw', 'sw', 'pr', 'fp32', 'eager', :timer, :statistic, :n, :value_ms, :median_ms, :mean_ms, "
                ":std_ms, :min_ms, :max_ms, :ci95_low_ms, :ci95_high_ms, :samples_ms, '{}', TRUE, 'measured', "
                ":now)"
            ),
            {**stats, "sha": "a" * 64, "now": _NOW},
        )
        if engine.dialect.name == "postgresql":  # explicit ids: move the sequences past them
            for t in (
                "runs",
                "problems",
                "run_problems",
                "samples",
                "attempts",
                "results",
                "timings",
                "baselines",
            ):
                c.execute(text(f"SELECT setval(pg_get_serial_sequence('{t}', 'id'), 1)"))
    engine.dispose()


def test_upgrade_from_first_revision_keeps_data(db_url: str) -> None:
    upgrade_schema(db_url, "0001")
    engine = create_engine(db_url)
    with engine.connect() as c:
        assert MigrationContext.configure(c).get_current_revision() == "0001"
        cols = (
            {r[1] for r in c.exec_driver_sql("PRAGMA table_info(run_problems)")}
            if engine.dialect.name == "sqlite"
            else {
                r[0]
                for r in c.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns WHERE "
                        "table_name = 'run_problems' AND table_schema = current_schema()"
                    )
                )
            }
        )
        assert "flags" not in cols
    engine.dispose()
    _insert_rev1_rows(db_url)

    with Store(db_url) as store:  # opening upgrades to head
        assert store.schema_revision() == "0003"
        info = store.get_run("old-run")
        assert info is not None and info.model == "old-model" and info.status == "finished"
        assert info.kbench_version == "0.0.9" and info.finished_at is not None
        [p] = store.run_problems("old-run")
        assert (p.key, p.name, p.code, p.code_sha256) == ("L1/4", "Matmul", "# code", "a" * 64)
        df = store.results_frame("old-run")
        assert len(df) == 1 and df.iloc[0].speedup_eager == 2.0 and df.iloc[0].code == "class ModelNew: pass"
        [a] = store.attempts_for_sample("old-run", 1, 4, "old-model", 0)
        assert a.result.outcome is Outcome.CORRECT and a.result.candidate.samples_ms == (0.49, 0.5, 0.52)
        assert a.messages == [{"role": "user", "content": "hi"}] and a.reply == "the reply"
        assert store.timing_samples(a.result_id).n == 3
        b = store.find_baseline(
            problem_sha256="a" * 64,
            hardware_fingerprint="hw",
            software_fingerprint="sw",
            protocol_fingerprint="pr",
            precision="fp32",
            mode="eager",
        )
        assert b is not None and b.value_ms == 0.5 and b.measured_here
        # the new column works and new rows get fresh ids
        store.set_problem_flags("old-run", {"L1/4": ["degenerate"]})
        assert store.problem_flags("old-run") == {"L1/4": ["degenerate"]}
        assert store.done_attempts("old-run") == {(1, 4, "old-model", 0, 0)}
        store.create_run("new-run", model="x", protocol={}, config={}, hardware={}, problems=[p])
        assert [r.run_name for r in store.list_runs()] == ["old-run", "new-run"]


def test_upgrade_from_0002_records_runners_and_judges_older_running_runs(db_url: str) -> None:
    """Revision 0003 adds the runner and its heartbeat to ``runs``. A run an older kbench left as running
    (its runner killed: nothing recorded who it was) reads as interrupted and can be resumed."""
    upgrade_schema(db_url, "0002")
    _insert_rev1_rows(db_url)
    engine = Store._make_engine(db_url)
    with engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO runs (id, run_name, model, status, created_at, finished_at, protocol_name, precision, "
                "protocol_fingerprint, hardware_fingerprint, protocol, config, hardware, kbench_version) VALUES "
                "(2, 'old-killed', 'old-model', 'running', :now, NULL, 'kbench', 'fp32', 'pfp', 'hfp', '{}', "
                "'{}', '{}', '0.0.9')"
            ),
            {"now": _NOW},
        )
        if engine.dialect.name == "postgresql":
            c.execute(text("SELECT setval(pg_get_serial_sequence('runs', 'id'), 2)"))
    engine.dispose()

    with Store(db_url) as store:
        assert store.schema_revision() == "0003"
        old, killed = store.list_runs()
        assert (old.run_name, old.status, old.status_note, old.runner_pid) == ("old-run", "finished", "", None)
        assert (killed.run_name, killed.status) == ("old-killed", "interrupted")
        assert "runner unknown" in killed.status_note and killed.heartbeat_at is None
        store.claim_run("old-killed")  # resumed by this process
        info = store.get_run("old-killed")
        assert info is not None and (info.status, info.runner_pid) == ("running", os.getpid())
        assert info.heartbeat_at is not None
        store.create_run("new-run", model="x", protocol={}, config={}, hardware={},
                         problems=store.run_problems("old-run"))
        assert store.get_run("new-run").runner_pid == os.getpid()  # type: ignore[union-attr]


def test_migrated_schema_matches_models(db_url: str) -> None:
    with Store(db_url) as store, store._engine.connect() as c:
        diff = compare_metadata(MigrationContext.configure(c, opts={"compare_type": True}), Base.metadata)
    assert diff == [], diff


_WRITER = textwrap.dedent("""
    import itertools, sys, time
    from kernelbench_harness.core import Backend, Candidate, EvalResult, Outcome, Problem, TimingStats
    from kernelbench_harness.store import Store

    store = Store(sys.argv[1])
    probs = [Problem(1, i, f"P{i}", f"# problem {i}\\n") for i in range(1, 51)]
    store.create_run("killed", model="m", protocol={"name": "kbench"}, config={}, hardware={}, problems=probs)
    st = TimingStats(1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 200, tuple([1.0] * 200))
    print("ready", flush=True)
    # never finishes on its own: the test always kills it mid-run, however fast the machine
    for sample_id, p in ((s, p) for s in itertools.count() for p in probs):
        res = EvalResult(Outcome.CORRECT, compiled=True, correct=True, candidate=st, eager_ms=2.0, compile_ms=2.0,
                         log="x" * 5000)
        store.record_attempt("killed", problem=p, candidate=Candidate(1, p.problem_id, "src" * 500, Backend.CUDA),
                             model="m", sample_id=sample_id, turn=0, messages=[{"role": "user", "content": "y" * 2000}],
                             reply="z" * 2000, generation=None, result=res)
""")


def test_killed_writer_loses_at_most_the_candidate_in_flight(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with Store(url) as store:
            deadline = time.monotonic() + 60
            while len(store.done_attempts("killed")) < 30 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with Store(url) as store:
        with store._engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
            attempts = c.exec_driver_sql("SELECT COUNT(*) FROM attempts").scalar()
            results = c.exec_driver_sql("SELECT COUNT(*) FROM results").scalar()
            timings = c.exec_driver_sql("SELECT COUNT(*) FROM timings").scalar()
        done = store.done_attempts("killed")
        assert len(done) >= 30
        assert attempts == results == timings == len(done)  # no half-written candidate
        order = sorted(done, key=lambda k: (k[3], k[1]))  # the writer's order: sample_id, then problem_id
        expected = [(1, 1 + i % 50, "m", i // 50, 0) for i in range(len(done))]
        assert order == expected  # everything before the kill is there
        df = store.results_frame("killed")
        assert (df.outcome == "correct").all() and len(df) == len(done)
