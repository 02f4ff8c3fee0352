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

from .conftest import SHORT_TIMING_ARGS, kbench

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


def test_sigkill_twice_then_resume_equals_uninterrupted(workdir):
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
    assert whole_run.returncode == 0, f"uninterrupted run failed:\n{whole_log.read_text()[-3000:]}"
    whole = _results(whole_db, "whole")
    assert len(whole) == 3
    cut = _results(db, "cut")
    # same verdicts per (level, problem, sample, turn), each recorded exactly once
    assert [r[:4] for r in cut] == [r[:4] for r in whole]
    assert [r[4] for r in cut] == [r[4] for r in whole]
    with sqlite3.connect(db) as c:
        status = c.execute("select status from runs where run_name='cut'").fetchone()[0]
    assert status == "finished"
