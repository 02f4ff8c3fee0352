"""A runner killed with SIGKILL (twice) and resumed gives the table of an uninterrupted run, and no
candidate is recorded twice."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from early import Early, in_child

from .conftest import SHORT_TIMING, SHORT_TIMING_ARGS, kbench

# short timing: what is stored and resumed is under test, not the times
ARGS = ["run", "--model", "bundled", "--level", "1", "--ids", "1-3", "--gpus", "cpu", "--display", "plain", "--no-report",
        "--timeout", "120", *SHORT_TIMING_ARGS]


def _results(db: Path, run: str) -> list[tuple[int, int, int, int, str]]:
    with sqlite3.connect(db) as c:
        return sorted(c.execute(
            "select s.level, s.problem_id, s.sample_id, a.turn, r.outcome from results r "
            "join attempts a on r.attempt_pk = a.id join samples s on a.sample_pk = s.id "
            "join runs u on s.run_id = u.id where u.run_name = ?", (run,)).fetchall())


def _count(db: Path, run: str) -> int:
    try:
        return len(_results(db, run))
    except sqlite3.Error:
        return 0


def _kill_after(workdir: Path, db: Path, run: str, n: int, extra: list[str]) -> None:
    p = subprocess.Popen([sys.executable, "-m", "kernelbench_harness", *ARGS, "--run-name", run, "--db", str(db),
                          *extra], cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    deadline = time.monotonic() + 300
    while _count(db, run) < n and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:  # it finished first
        pass
    p.wait()


def _sigkill_twice_then_resume(workdir: Path) -> dict:
    """The runs of the test below (in a child interpreter, beside the tests before it: tests/early.py)."""
    (workdir / "results").mkdir()
    db = workdir / "results" / "kb.db"
    # the uninterrupted run depends on nothing of the interrupted one: it runs beside it, in a store of its own
    whole_db = workdir / "results" / "whole.db"
    whole_log = workdir / "whole.log"
    with open(whole_log, "w") as log:  # a file, not a pipe: nothing read meanwhile can block it
        whole_run = subprocess.Popen([sys.executable, "-m", "kernelbench_harness", *ARGS, "--run-name", "whole",
                                      "--db", str(whole_db)], cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
    try:
        _kill_after(workdir, db, "cut", 1, [])
        first = _count(db, "cut")
        assert 1 <= first < 3
        _kill_after(workdir, db, "cut", first + 1, ["--resume"])
        kbench(*ARGS, "--run-name", "cut", "--db", str(db), "--resume", cwd=workdir)
        whole_run.wait(timeout=600)
    finally:
        if whole_run.poll() is None:  # the test failed first: end it
            os.killpg(whole_run.pid, signal.SIGKILL)
            whole_run.wait()
    return {"db": db, "whole_db": whole_db, "whole_returncode": whole_run.returncode,
            "whole_log": whole_log.read_text()[-3000:]}


def _ctrl_c(workdir: Path) -> dict:
    """The run of test_ctrl_c_says_how_to_continue_without_tracebacks, stopped by SIGINT (in a child
    interpreter, beside the tests before it: tests/early.py)."""
    (workdir / "results").mkdir()
    db = workdir / "results" / "ctrlc.db"
    args = [a for a in ARGS if a not in ("--display", "plain")]
    p = subprocess.Popen([sys.executable, "-m", "kernelbench_harness", *args, "--display", "plain", "--db", str(db)],
                         cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    deadline = time.monotonic() + 300
    while p.poll() is None and time.monotonic() < deadline:
        try:
            with sqlite3.connect(db) as c:
                if c.execute("select count(*) from results").fetchone()[0] >= 1:
                    break
        except sqlite3.Error:
            pass
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    return {"db": db, "returncode": p.returncode, "out": out}


def test_sigkill_twice_then_resume_equals_uninterrupted(sigkill_runs):
    db, whole_db = sigkill_runs["db"], sigkill_runs["whole_db"]
    assert sigkill_runs["whole_returncode"] == 0, f"uninterrupted run failed:\n{sigkill_runs['whole_log']}"
    whole = _results(whole_db, "whole")
    assert len(whole) == 3
    cut = _results(db, "cut")
    # same verdicts per (level, problem, sample, turn), each recorded exactly once
    assert [r[:4] for r in cut] == [r[:4] for r in whole]
    assert [r[4] for r in cut] == [r[4] for r in whole]
    with sqlite3.connect(db) as c:
        status = c.execute("select status from runs where run_name='cut'").fetchone()[0]
    assert status == "finished"


def _resumes_after_harness_errors(tmp_path: Path) -> dict:
    """The runs of the test below (in a child interpreter, beside the tests before it: tests/early.py); returns
    what the test checks between them, in its order, up to the first step that went wrong."""
    import asyncio
    import json

    from kernelbench_harness.runner import RunConfig, execute_run
    from kernelbench_harness.store import Store

    db = tmp_path / "kb.db"
    cfg = RunConfig(model="bundled", levels=(1,), ids="1-2", run_name="r", db=f"sqlite:///{db}", gpus="cpu",
                    build_cache=str(tmp_path / "cache"), timeout_s=120, protocol_overrides=SHORT_TIMING)
    first = asyncio.run(execute_run(cfg))
    seen: dict = {"db": db, "first": first.outcomes}
    if first.outcomes != {"correct": 2}:
        return seen
    with sqlite3.connect(db) as c:  # problem 1's verdict becomes a harness error, as a killed worker's
        rid, extra = c.execute("select r.id, r.extra from results r join attempts a on r.attempt_pk = a.id "
                               "join samples s on a.sample_pk = s.id where s.problem_id = 1").fetchone()
        extra = {**json.loads(extra), "harness_error": True}
        c.execute("update results set outcome = 'runtime_error', error = 'device worker died (exit code -9)', "
                  "extra = ? where id = ?", (json.dumps(extra), rid))
        kept = c.execute("select r.id from results r join attempts a on r.attempt_pk = a.id "
                         "join samples s on a.sample_pk = s.id where s.problem_id = 2").fetchone()[0]
    seen.update(rid=rid, kept=kept)
    # a harness error of a sample this run does not plan (another model's, say) is left alone on resume
    from kernelbench_harness.core import EvalResult, Outcome

    with Store(f"sqlite:///{db}") as st0:
        st0.record_attempt("r", problem=st0.run_problems("r")[0], candidate=None, model="other-model", sample_id=0,
                           turn=0, messages=None, reply=None, generation=None,
                           result=EvalResult(Outcome.RUNTIME_ERROR, error="gone", extra={"harness_error": True}))
    # cut again before the new verdict is stored: nothing is lost, the harness error is still there
    real = Store.record_attempt

    def cut(self, *a, **k):
        raise KeyboardInterrupt
    Store.record_attempt = cut
    try:
        asyncio.run(execute_run(cfg, resume=True))
        seen["cut_interrupted"] = False
    except KeyboardInterrupt:
        seen["cut_interrupted"] = True
    finally:
        Store.record_attempt = real
    if not seen["cut_interrupted"]:
        return seen
    with sqlite3.connect(db) as c:
        seen["after_cut"] = c.execute("select outcome from results where id = ?", (rid,)).fetchone()
    again = asyncio.run(execute_run(cfg, resume=True))
    seen["again"] = (again.evaluated, again.outcomes)
    return seen


def test_resume_evaluates_again_what_failed_for_a_reason_not_the_candidates(resumed_after_harness_errors):
    """A verdict the harness caused (a device worker that died, the trusted side out of memory:
    ``extra.harness_error``) or the provider's failed request (``generation_error``) is evaluated again by
    ``--resume``; the new verdict keeps the one it replaces; good verdicts are kept as they are."""
    from kernelbench_harness.store import Store

    seen = resumed_after_harness_errors
    db = seen["db"]
    assert seen["first"] == {"correct": 2}
    kept = seen["kept"]
    # the resume cut before the new verdict was stored lost nothing: the harness error is still there
    assert seen["cut_interrupted"], "the resume whose store was cut did not stop with KeyboardInterrupt"
    assert seen["after_cut"] == ("runtime_error",)
    evaluated, outcomes = seen["again"]
    assert evaluated == 1 and outcomes == {"correct": 1}
    st = Store(f"sqlite:///{db}")
    try:
        by_id = {a.problem_id: a for a in st.attempts("r") if a.model != "other-model"}
        assert str(by_id[1].result.outcome) == "correct"
        earlier = by_id[1].result.extra["earlier_attempt"]
        assert earlier["outcome"] == "runtime_error" and earlier["error"] == "device worker died (exit code -9)"
        assert [t["turn"] for t in earlier["replaced_turns"]] == [0]
        assert by_id[2].result_id == kept and "earlier_attempt" not in by_id[2].result.extra
        assert list(st.retryable_attempts("r")) == [(1, 1, "other-model", 0, 0)]  # not planned: kept
    finally:
        st.close()
    with sqlite3.connect(db) as c:  # nothing of the replaced verdict is left behind
        assert c.execute("select count(*) from attempts").fetchone()[0] == 3
        assert c.execute("select count(*) from timings t left join results r on t.result_pk = r.id "
                         "where r.id is null").fetchone()[0] == 0


def test_ctrl_c_says_how_to_continue_without_tracebacks(ctrl_c_run):
    """Ctrl-C (SIGINT to the terminal's process group) stops a run: it is stored as interrupted, the last
    lines say how to continue it, and no worker prints a traceback or is restarted."""
    db, out = ctrl_c_run["db"], ctrl_c_run["out"]
    assert ctrl_c_run["returncode"] == 130, out[-3000:]
    with sqlite3.connect(db) as c:
        [(name, status)] = c.execute("select run_name, status from runs").fetchall()
    assert status == "interrupted"
    assert f"run {name}; if it stops, continue it with: kbench run --run-name {name} --resume --db" in out
    assert f"continue it with: kbench run --run-name {name} --resume --db {db}" in out.splitlines()[-1]
    assert "Traceback" not in out and "restarting" not in out, out[-3000:]


# queued when the session is collected (tests/early.py): these runs are all in processes of their own
EARLY = {"sigkill_runs": Early(in_child(_sigkill_twice_then_resume)), "ctrl_c_run": Early(in_child(_ctrl_c)),
         "resumed_after_harness_errors": Early(in_child(_resumes_after_harness_errors))}


@pytest.fixture
def sigkill_runs() -> dict:
    return EARLY["sigkill_runs"].result()


@pytest.fixture
def ctrl_c_run() -> dict:
    return EARLY["ctrl_c_run"].result()


@pytest.fixture
def resumed_after_harness_errors() -> dict:
    return EARLY["resumed_after_harness_errors"].result()
