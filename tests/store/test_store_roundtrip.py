"""The results store on SQLite and on the real PostgreSQL server: round trips, idempotence, baselines."""

from __future__ import annotations

import math
import threading

import pandas as pd
import pytest
from sqlalchemy import func, select, text

from kernelbench_harness.core import (
    Backend,
    Candidate,
    EvalResult,
    Finding,
    Outcome,
    Problem,
    Severity,
    TimingStats,
)
from kernelbench_harness.errors import ConfigError, StoreError
from kernelbench_harness.protocols import get_protocol
from kernelbench_harness.store import RESULT_COLUMNS, RunStatus, Store
from kernelbench_harness.store.models import AttemptRow, ProblemRow, ResultRow, TimingRow

HW = {
    "device_type": "cuda",
    "device_name": "NVIDIA H200",
    "hardware_fingerprint": "hwfp-1",
    "clocks": [{"sm": 1}],
}


def _problems() -> list[Problem]:
    return [
        Problem(2, 5, "Gemm", "# gemm\n"),
        Problem(1, 10, "Relu10", "# relu 10\n"),
        Problem(1, 2, "Relu", "# relu\n"),
    ]


def _stats(ms: float) -> TimingStats:
    return TimingStats(
        median_ms=ms,
        mean_ms=ms * 1.01,
        std_ms=0.01,
        min_ms=ms * 0.9,
        max_ms=ms * 1.2,
        ci95_low_ms=ms * 0.99,
        ci95_high_ms=ms * 1.01,
        n=4,
        samples_ms=(ms, ms * 0.9, ms * 1.2, ms),
        timer="cuda_events",
        statistic="median",
    )


def _result(**kw) -> EvalResult:  # type: ignore[no-untyped-def]
    base = dict(
        outcome=Outcome.CORRECT,
        compiled=True,
        correct=True,
        max_abs_err=1e-6,
        max_rel_err=float("nan"),
        allclose_kernelbench=True,
        candidate=_stats(0.5),
        eager_ms=1.0,
        compile_ms=0.8,
        baseline_id=7,
        findings=(Finding("static.x", Severity.INFO, "", "note", {"line": 3}),),
        error="",
        log="log text",
        phase_s={"build": 1.5},
        device="cuda:0",
        extra={
            "baselines": {"compile:max-autotune": _stats(0.4).to_dict()},
            "problem_flags": ["nondeterministic-reference"],
        },
    )
    base.update(kw)
    return EvalResult(**base)


def _record(
    store: Store,
    p: Problem,
    result: EvalResult,
    *,
    model: str = "m",
    sample: int = 0,
    turn: int = 0,
    code: str | None = "class ModelNew: pass  # triton.jit",
    messages=None,
    reply=None,
    gen=None,
    replace_from_turn: int | None = None,
) -> int:
    cand = (
        Candidate(p.level, p.problem_id, code, Backend.TRITON, sample, turn, model)
        if code is not None
        else None
    )
    return store.record_attempt(
        "r",
        problem=p,
        candidate=cand,
        model=model,
        sample_id=sample,
        turn=turn,
        messages=messages,
        reply=reply,
        generation=gen,
        result=result,
        replace_from_turn=replace_from_turn,
    )


@pytest.fixture
def store(db_url):  # type: ignore[no-untyped-def]
    s = Store(db_url)
    s.create_run(
        "r",
        model="m",
        protocol=get_protocol("kbench").to_dict(),
        config={"samples": 2},
        hardware=HW,
        problems=_problems(),
    )
    yield s
    s.close()


def test_runs_round_trip(store: Store) -> None:
    info = store.get_run("r")
    assert info is not None and info.model == "m" and info.status == "running" and info.problem_count == 3
    assert info.protocol == get_protocol("kbench").to_dict() and info.config == {"samples": 2}
    assert (
        info.hardware_fingerprint == "hwfp-1" and info.protocol_name == "kbench" and info.precision == "fp32"
    )
    assert info.protocol_fingerprint == get_protocol("kbench").fingerprint()
    assert info.created_at.tzinfo is not None and info.finished_at is None
    assert [p.key for p in store.run_problems("r")] == ["L1/2", "L1/10", "L2/5"]  # sorted by level, id
    assert store.run_problems("r")[0].code == "# relu\n"
    assert [r.run_name for r in store.list_runs()] == ["r"]
    assert store.get_run("nope") is None
    with pytest.raises(StoreError, match="already exists"):
        store.create_run("r", model="m", protocol={}, config={}, hardware={}, problems=[])
    with pytest.raises(StoreError):
        store.run_problems("nope")
    store.set_run_status("r", "finished", hardware={**HW, "hardware_fingerprint": "hwfp-2"})
    info = store.get_run("r")
    assert info.status == RunStatus.FINISHED and info.finished_at is not None
    assert info.hardware_fingerprint == "hwfp-2"
    with pytest.raises(ConfigError):
        store.set_run_status("r", "paused")
    # problems are deduplicated by code hash across runs
    store.create_run("r2", model="m", protocol={}, config={}, hardware={}, problems=_problems()[:2])
    with store._read() as s:
        assert s.scalar(select(func.count()).select_from(ProblemRow)) == 3


def test_record_attempt_round_trip(store: Store) -> None:
    p = store.run_problems("r")[0]
    msgs = [{"role": "user", "content": "write a kernel"}]
    gen = {
        "text": "reply text",
        "code": "x",
        "model": "m-2026",
        "input_tokens": 10,
        "output_tokens": 20,
        "cached_tokens": 3,
        "reasoning_tokens": 4,
        "latency_s": 1.5,
        "cost_usd": 0.01,
        "error": "",
        "error_kind": "",
        "attempts": 2,
    }
    res = _result()
    rid = _record(store, p, res, messages=msgs, reply=None, gen=gen)
    assert store.done_attempts("r") == {(1, 2, "m", 0, 0)}
    [rec] = store.attempts_for_sample("r", 1, 2, "m", 0)
    assert rec.result_id == rid and rec.turn == 0 and rec.messages == msgs and rec.reply == "reply text"
    assert rec.code == "class ModelNew: pass  # triton.jit" and rec.backend == "triton"
    got = rec.result
    assert math.isnan(got.max_rel_err)  # NaN survives JSON on both databases
    a, b = got.to_dict(), res.to_dict()
    a.pop("max_rel_err"), b.pop("max_rel_err")
    assert a == b
    assert got.candidate == res.candidate and got.findings == res.findings
    assert rec.generation["input_tokens"] == 10 and rec.generation["cost_usd"] == 0.01
    assert store.timing_samples(rid).samples_ms == res.candidate.samples_ms

    df = store.results_frame("r")
    assert list(df.columns) == list(RESULT_COLUMNS) and len(df) == 1
    row = df.iloc[0]
    assert (row.level, row.problem_id, row["name"], row.model, row.sample_id, row.turn) == (
        1,
        2,
        "Relu",
        "m",
        0,
        0,
    )
    assert row.outcome == "correct" and bool(row.has_speedup) and bool(row.passed)
    assert row.speedup_eager == pytest.approx(2.0) and row.speedup_compile == pytest.approx(1.6)
    assert (
        row.candidate_ms == 0.5 and row.input_tokens == 10 and row.cost_usd == 0.01 and row.latency_s == 1.5
    )
    assert row.baselines_ms == {
        "eager": 1.0,
        "compile:default": 0.8,
        "compile:max-autotune": pytest.approx(0.4),
    }
    assert row.problem_flags == ["nondeterministic-reference"]
    assert row.findings == [res.findings[0].to_dict()] and row.result_id == rid

    # a cheat has no speedup even with times; generation errors have no candidate
    _record(store, p, _result(outcome=Outcome.CHEAT, tag="timer-tamper"), sample=1)
    _record(
        store,
        p,
        EvalResult(Outcome.GENERATION_ERROR),
        sample=2,
        code=None,
        gen={"text": "", "code": None, "model": "m", "error": "rate limited", "error_kind": "rate_limit"},
    )
    df = store.results_frame("r")
    cheat = df[df.sample_id == 1].iloc[0]
    assert cheat.outcome == "cheat" and cheat.tag == "timer-tamper" and not cheat.has_speedup
    assert cheat.speedup_eager is None or math.isnan(cheat.speedup_eager)
    ge = df[df.sample_id == 2].iloc[0]
    assert ge.backend == "none" and pd.isna(ge.code) and ge.generation_error == "rate limited"


def test_record_attempt_is_idempotent(store: Store) -> None:
    p = store.run_problems("r")[0]
    first = _record(store, p, _result(), reply="one")
    again = _record(store, p, _result(outcome=Outcome.INCORRECT, correct=False), reply="two")
    assert again == first
    [rec] = store.attempts_for_sample("r", 1, 2, "m", 0)
    assert rec.reply == "one" and rec.result.outcome is Outcome.CORRECT
    with store._read() as s:
        assert s.scalar(select(func.count()).select_from(AttemptRow)) == 1
        assert s.scalar(select(func.count()).select_from(ResultRow)) == 1
        assert s.scalar(select(func.count()).select_from(TimingRow)) == 1
    # a second turn of the same sample is a new attempt; turns come back in order
    second = _record(store, p, _result(candidate=_stats(0.25)), turn=1)
    assert second != first
    assert [a.turn for a in store.attempts_for_sample("r", 1, 2, "m", 0)] == [0, 1]


def test_retryable_turns_are_found_and_discarded_with_what_follows(store: Store) -> None:
    """What ``--resume`` evaluates again: a harness error or a generation error, and the turns after it."""
    p = store.run_problems("r")[0]
    _record(store, p, _result(), turn=0)
    _record(store, p, _result(outcome=Outcome.RUNTIME_ERROR, correct=False, error="device worker died",
                              extra={"harness_error": True}), turn=1)
    _record(store, p, _result(), turn=2)
    _record(store, p, _result(outcome=Outcome.GENERATION_ERROR, correct=False, candidate=None, error="HTTP 503"),
            sample=1, code=None)
    _record(store, p, _result(outcome=Outcome.INCORRECT, correct=False, error="wrong"), sample=1, turn=1)
    retry = store.retryable_attempts("r")
    assert retry == {(1, 2, "m", 0, 1): {"outcome": "runtime_error", "error": "device worker died"},
                     (1, 2, "m", 1, 0): {"outcome": "generation_error", "error": "HTTP 503"}}
    gone = store.discard_attempts_from("r", 1, 2, "m", 0, 1)
    assert [(g["turn"], g["outcome"]) for g in gone] == [(1, "runtime_error"), (2, "correct")]
    assert [a.turn for a in store.attempts_for_sample("r", 1, 2, "m", 0)] == [0]
    assert store.discard_attempts_from("r", 1, 2, "m", 9, 0) == []  # no such sample
    with store._read() as s:
        assert s.scalar(select(func.count()).select_from(AttemptRow)) == 3
        assert s.scalar(select(func.count()).select_from(ResultRow)) == 3
        assert s.scalar(select(func.count()).select_from(TimingRow)) == 2  # the generation error timed nothing
    # a resumed run's new turn replaces the failed one and those after it, in one transaction
    new_id = _record(store, p, _result(), sample=1, turn=0, replace_from_turn=0)
    [rec] = store.attempts_for_sample("r", 1, 2, "m", 1)
    assert rec.result_id == new_id and rec.result.outcome is Outcome.CORRECT
    earlier = rec.result.extra["earlier_attempt"]
    assert earlier["outcome"] == "generation_error" and earlier["error"] == "HTTP 503"
    assert [t["turn"] for t in earlier["replaced_turns"]] == [0, 1]


def test_a_harness_error_is_evaluated_again_a_bounded_number_of_times(store: Store) -> None:
    """A turn stored as a harness error again after each re-evaluation (a candidate that holds device memory
    on purpose, say) stops being retried after ``MAX_HARNESS_RETRIES``; a generation error does not."""
    p = store.run_problems("r")[0]
    failed = dict(outcome=Outcome.RUNTIME_ERROR, correct=False, error="trusted side out of memory",
                  extra={"harness_error": True, "trusted_oom": True})
    _record(store, p, _result(**failed), turn=0)
    key = (1, 2, "m", 0, 0)
    for n in range(1, Store.MAX_HARNESS_RETRIES + 1):
        assert key in store.retryable_attempts("r")
        _record(store, p, _result(**failed), turn=0, replace_from_turn=0)
        [rec] = store.attempts_for_sample("r", 1, 2, "m", 0)
        assert rec.result.extra["retries"] == n
    assert key not in store.retryable_attempts("r")
    # a generation error's retries do not use up the harness errors' budget
    gen = dict(outcome=Outcome.GENERATION_ERROR, correct=False, candidate=None, error="HTTP 503")
    _record(store, p, _result(**gen), sample=1, code=None)
    for _ in range(3):
        assert (1, 2, "m", 1, 0) in store.retryable_attempts("r")
        _record(store, p, _result(**gen), sample=1, code=None, replace_from_turn=0)
    _record(store, p, _result(**failed), sample=1, turn=0, replace_from_turn=0)
    [rec] = store.attempts_for_sample("r", 1, 2, "m", 1)
    assert rec.result.extra["retries"] == 0 and (1, 2, "m", 1, 0) in store.retryable_attempts("r")


def test_concurrent_record_attempt_stores_once(store: Store) -> None:
    p = store.run_problems("r")[1]
    ids: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            ids.append(_record(store, p, _result(), sample=5))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(ids)) == 1
    assert len(store.attempts_for_sample("r", 1, 10, "m", 5)) == 1


def test_failed_write_leaves_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A result write is one transaction: an error after the attempt row was inserted rolls it all back."""
    from kernelbench_harness.store import api

    p = store.run_problems("r")[0]

    def boom(stats):  # type: ignore[no-untyped-def]
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(api, "_stats_columns", boom)
    with pytest.raises(RuntimeError):
        _record(store, p, _result())
    monkeypatch.undo()
    assert store.done_attempts("r") == set()
    with store._read() as s:
        assert s.scalar(select(func.count()).select_from(AttemptRow)) == 0
        assert s.scalar(select(func.count()).select_from(ResultRow)) == 0
    _record(store, p, _result())
    assert store.done_attempts("r") == {(1, 2, "m", 0, 0)}


def test_problem_flags(store: Store) -> None:
    store.set_problem_flags("r", {"L2/5": ["degenerate", "degenerate"]})
    assert store.problem_flags("r") == {"L2/5": ["degenerate"]}
    store.set_problem_flags("r", {"L2/5": []})
    assert store.problem_flags("r") == {}
    with pytest.raises(StoreError):
        store.set_problem_flags("r", {"L9/9": ["degenerate"]})


def test_problem_outside_scope_is_added(store: Store) -> None:
    extra = Problem(3, 1, "Net", "# net\n")
    _record(store, extra, _result())
    assert "L3/1" in [p.key for p in store.run_problems("r")]


def test_baseline_exact_match(store: Store) -> None:
    p = store.run_problems("r")[0]
    key = dict(
        problem_sha256=p.code_sha256,
        hardware_fingerprint="hw",
        software_fingerprint="sw",
        protocol_fingerprint="pr",
        precision="fp32",
        mode="eager",
    )
    assert store.find_baseline(**key) is None
    bid = store.put_baseline(
        problem=p,
        hardware_fingerprint="hw",
        software_fingerprint="sw",
        protocol_fingerprint="pr",
        precision="fp32",
        mode="eager",
        stats=_stats(1.25),
        hardware={"device_name": "X"},
    )
    rec = store.find_baseline(**key)
    assert rec is not None and rec.id == bid and rec.stats == _stats(1.25) and rec.value_ms == 1.25
    assert rec.measured_here and rec.source == "measured" and rec.hardware == {"device_name": "X"}
    assert (rec.level, rec.problem_id, rec.name) == (1, 2, "Relu")
    # any changed part of the key misses
    for field, other in (
        ("problem_sha256", "0" * 64),
        ("hardware_fingerprint", "hw2"),
        ("software_fingerprint", "sw2"),
        ("protocol_fingerprint", "pr2"),
        ("precision", "fp16"),
        ("mode", "compile:default"),
    ):
        assert store.find_baseline(**{**key, field: other}) is None, field
    # a newer measurement under the same key wins
    bid2 = store.put_baseline(
        problem=p,
        hardware_fingerprint="hw",
        software_fingerprint="sw",
        protocol_fingerprint="pr",
        precision="fp32",
        mode="eager",
        stats=_stats(1.5),
        hardware={},
        measured_here=False,
        source="imported:X",
    )
    assert store.find_baseline(**key).id == bid2
    df = store.baselines_frame(hardware_fingerprint="hw")
    assert list(df["id"]) == [bid, bid2] and list(df["value_ms"]) == [1.25, 1.5]
    assert len(store.baselines_frame(measured_here=False)) == 1
    assert len(store.baselines_frame(mode=["eager", "compile:default"])) == 2
    with pytest.raises(ConfigError):
        store.baselines_frame(colour="red")


def test_sqlite_settings_and_default_location(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with Store() as s:
        assert s.url == "sqlite:///results/kbench.db"
        assert (tmp_path / "results" / "kbench.db").exists()
        with s._engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert s.schema_revision() == "0003"
        assert {
            "runs",
            "problems",
            "run_problems",
            "samples",
            "attempts",
            "results",
            "timings",
            "baselines",
            "alembic_version",
        } <= set(s.table_names())
    with pytest.raises(StoreError, match="no results database"):
        Store(f"sqlite:///{tmp_path / 'missing.db'}", create=False)


def test_newer_schema_is_refused(db_url: str) -> None:
    with Store(db_url) as s, s._engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    with pytest.raises(StoreError, match="newer than this kbench knows") as exc:
        Store(db_url)
    assert "upgrade kbench" in str(exc.value)


def test_unreachable_postgres_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="cannot open"):
        Store("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
