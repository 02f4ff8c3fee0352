"""A runner killed with SIGKILL (twice) and resumed gives the table of an uninterrupted run, and no
candidate is recorded twice; a killed runner's run reads as interrupted, a second runner is refused while the
first lives, and a resume with nothing to evaluate says so before any device worker starts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
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


def _write_lock_free(db: Path) -> bool:
    """Whether no process holds the SQLite store's write lock (a runner stopped inside a transaction would)."""
    try:
        c = sqlite3.connect(db, timeout=0.05, isolation_level=None)
        try:
            c.execute("BEGIN IMMEDIATE")
            c.execute("ROLLBACK")
        finally:
            c.close()
        return True
    except sqlite3.OperationalError:
        return False


def _kill_after(workdir: Path, db: Path, run: str, n: int, extra: list[str],
                probe: Callable[[int], dict] | None = None) -> dict:
    """Start a runner, SIGKILL it once it stored ``n`` results. With ``probe``, the runner is first stopped
    (SIGSTOP: alive, but it cannot finish meanwhile) outside a store transaction, and ``probe(its pid)`` runs;
    returns what the probe returned, with ``pid``."""
    p = subprocess.Popen([sys.executable, "-m", "kernelbench_harness", *ARGS, "--run-name", run, "--db", str(db),
                          *extra], cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    seen: dict = {"pid": p.pid}
    try:
        deadline = time.monotonic() + 300
        while p.poll() is None and time.monotonic() < deadline:
            if _count(db, run) >= n:
                if probe is None:
                    break
                os.killpg(p.pid, signal.SIGSTOP)
                if _write_lock_free(db):  # the commands of the probe open the store
                    seen.update(probe(p.pid))
                    break
                os.killpg(p.pid, signal.SIGCONT)
            time.sleep(0.1)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:  # it finished first
            pass
        p.wait()
    return seen


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

    def while_alive(pid: int) -> dict:
        # a second runner is refused while the first lives, and `runs list` says who runs it
        seen = {"stopped_with": _count(db, "cut")}
        second = kbench(*ARGS, "--run-name", "cut", "--db", str(db), "--resume", cwd=workdir, check=False)
        seen["second"] = (second.returncode, second.stdout + second.stderr)
        seen["list_live"] = kbench("runs", "list", "--db", str(db), cwd=workdir).stdout
        seen["after_refusal"] = _count(db, "cut")
        return seen

    try:
        first_kill = _kill_after(workdir, db, "cut", 1, [], probe=while_alive)
        first_kill["list_killed"] = kbench("runs", "list", "--db", str(db), cwd=workdir).stdout
        first = _count(db, "cut")
        # (all 3 where the second runner, which should have been refused, evaluated the rest)
        assert 1 <= first < 3, f"{first} result(s) after the first kill; the second runner: {first_kill.get('second')}"
        _kill_after(workdir, db, "cut", first + 1, ["--resume"])
        kbench(*ARGS, "--run-name", "cut", "--db", str(db), "--resume", cwd=workdir)
        whole_run.wait(timeout=600)
    finally:
        if whole_run.poll() is None:  # the test failed first: end it
            os.killpg(whole_run.pid, signal.SIGKILL)
            whole_run.wait()
    return {"db": db, "whole_db": whole_db, "whole_returncode": whole_run.returncode,
            "whole_log": whole_log.read_text()[-3000:], "first_kill": first_kill}


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


#: starts a command (argv[1:]) with SIGINT ignored, as a non-interactive shell starts a command in the background
#: (exec keeps an ignored signal ignored), and SIGTERM at its default, whatever the tests were started from
_IGNORING_SIGINT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                    "signal.signal(signal.SIGTERM, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])")


def _signalled(workdir: Path, sig: signal.Signals) -> dict:
    """A run sent ``sig`` (to its process alone) once it stored a result; it starts with SIGINT ignored."""
    (workdir / "results").mkdir()
    db = workdir / "results" / "sig.db"
    p = subprocess.Popen([sys.executable, "-c", _IGNORING_SIGINT, sys.executable, "-m", "kernelbench_harness", *ARGS,
                          "--run-name", "sig", "--db", str(db)],
                         cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while p.poll() is None and _count(db, "sig") < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        stored_before = _count(db, "sig")
        os.kill(p.pid, sig)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    with sqlite3.connect(db) as c:
        status = c.execute("select status from runs where run_name = 'sig'").fetchone()[0]
    return {"db": db, "returncode": p.returncode, "out": out, "err": err, "status": status,
            "stored_before": stored_before, "stored_after": _count(db, "sig")}


def _sigint_to_the_process(workdir: Path) -> dict:
    return _signalled(workdir, signal.SIGINT)


def _sigterm(workdir: Path) -> dict:
    return _signalled(workdir, signal.SIGTERM)


@pytest.mark.parametrize("fixture,code,said", [("sigint_run", 130, "aborted"), ("sigterm_run", 143, "aborted (SIGTERM)")])
def test_sigint_to_the_process_and_sigterm_stop_a_run_as_ctrl_c_does(fixture, code, said, request):
    """`kill -INT <pid>` was ignored (the run went on to its end) when kbench started with SIGINT ignored, as every
    command a non-interactive shell starts in the background does; `kill <pid>` (SIGTERM) ended it at once without a
    word, and the run then read 'runner gone (killed or crashed)'. Both now stop it as Ctrl-C does."""
    run = request.getfixturevalue(fixture)
    err = run["err"]
    assert run["returncode"] == code, (run["out"][-2000:], err[-3000:])
    assert 1 <= run["stored_before"] and run["stored_after"] < 3  # stopped part-way, not run to its end
    assert run["status"] == "interrupted"
    lines = err.strip().splitlines()
    hint = f"run sig is stored as interrupted; continue it with: kbench run --run-name sig --resume --db {run['db']}"
    assert lines[-2:] == [said, hint], err[-3000:]
    assert "Traceback" not in err and "leaked semaphore" not in err, err[-3000:]


def test_a_live_runner_refuses_a_second_and_a_killed_one_reads_interrupted(sigkill_runs):
    """While a run's runner lives (here stopped with SIGSTOP), ``--resume`` of it is refused with the runner's
    pid and host and `runs list` shows who runs it; once the runner is SIGKILLed, `runs list` shows the run as
    interrupted (runner gone) with the command that continues it, and ``--resume`` completes it."""
    seen = sigkill_runs["first_kill"]
    pid, host = seen["pid"], socket.gethostname()
    code, out = seen["second"]
    assert code != 0, out[-3000:]
    assert "run 'cut' in sqlite:///" in out and f"is still being run by pid {pid} on this host ({host})" in out
    assert f"kill {pid}" in out and "Traceback" not in out, out[-3000:]
    assert seen["after_refusal"] == seen["stopped_with"]  # the refused runner evaluated nothing
    assert f"cut: running, runner: pid {pid} on this host ({host})" in seen["list_live"], seen["list_live"]
    killed = seen["list_killed"]
    assert "running" not in killed, killed
    assert f"cut: interrupted, runner gone: pid {pid} on this host ({host}) no longer runs (killed or crashed); " \
           "continue it with: kbench run --run-name cut --resume --db " in killed, killed
    # and --resume continued it to the end: test_sigkill_twice_then_resume_equals_uninterrupted


def test_nothing_to_evaluate_is_found_before_any_device_worker_starts(tmp_path, monkeypatch):
    """Resuming a run whose samples are all stored says "nothing to evaluate" and starts no device worker (nor
    the problems' sizing); a run cut after its last result, before it was marked finished, is marked finished."""
    import asyncio

    from kernelbench_harness import runner
    from kernelbench_harness.adapters.registry import get_adapter
    from kernelbench_harness.core import EvalResult, Outcome
    from kernelbench_harness.problems import load_problems
    from kernelbench_harness.store import Store

    db = f"sqlite:///{tmp_path / 'kb.db'}"
    cfg = runner.RunConfig(model="bundled", levels=(1,), ids="1-2", run_name="done", db=db, gpus="cpu",
                           build_cache=str(tmp_path / "cache"), protocol_overrides=SHORT_TIMING)
    problems = load_problems(None, levels=(1,), ids="1-2").problems
    specs = get_adapter("bundled", options={"device": "cpu"}).plan(problems, 1)
    with Store(db) as st:
        st.create_run("done", model="bundled", protocol=cfg.resolved_protocol().to_dict(),
                      config={"run_config": cfg.to_dict(), "run_seed": 1}, hardware={}, problems=problems)
        for sp in specs:
            st.record_attempt("done", problem=sp.problem, candidate=None, model=sp.model, sample_id=sp.sample_id,
                              turn=0, messages=None, reply=None, generation=None,
                              result=EvalResult(Outcome.CORRECT, compiled=True, correct=True))
        st.set_run_status("done", "interrupted")

    def started(*_a, **_k):
        raise AssertionError("a device worker (or the sizing child) was started")

    monkeypatch.setattr(runner, "_make_executor", started)
    monkeypatch.setattr(runner, "_start_sizing", started)
    notes: list[str] = []

    class Notes(runner._NullProgress):
        def note(self, message: str) -> None:
            notes.append(message)

    s = asyncio.run(runner.execute_run(cfg, resume=True, progress=Notes()))
    assert (s.evaluated, s.skipped_done, s.outcomes, s.status) == (0, len(specs), {}, "finished")
    assert f"nothing to evaluate: the {len(specs)} sample(s) of run done are complete; it is marked finished" in notes
    with Store(db) as st:
        info = st.get_run("done")
        assert info is not None and info.status == "finished" and info.finished_at is not None
    notes.clear()
    s = asyncio.run(runner.execute_run(cfg, resume=True, progress=Notes()))  # finished: left as it is
    assert s.evaluated == 0 and notes == [f"nothing to evaluate: the {len(specs)} sample(s) of run done are complete"]
    with Store(db) as st:
        assert st.get_run("done").finished_at == info.finished_at  # type: ignore[union-attr]


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
         "sigint_run": Early(in_child(_sigint_to_the_process)), "sigterm_run": Early(in_child(_sigterm)),
         "resumed_after_harness_errors": Early(in_child(_resumes_after_harness_errors))}


@pytest.fixture
def sigkill_runs() -> dict:
    return EARLY["sigkill_runs"].result()


@pytest.fixture
def ctrl_c_run() -> dict:
    return EARLY["ctrl_c_run"].result()


@pytest.fixture
def sigint_run() -> dict:
    return EARLY["sigint_run"].result()


@pytest.fixture
def sigterm_run() -> dict:
    return EARLY["sigterm_run"].result()


@pytest.fixture
def resumed_after_harness_errors() -> dict:
    return EARLY["resumed_after_harness_errors"].result()



#: a run's hardware record as an H200 machine stored it (docs/gpu/2026-11-29-s4's kernelsseum run, abridged)
H200 = {"device": "cuda:0", "device_type": "cuda", "torch": "2.11.0+cu130", "cuda": "13.0", "python": "3.12.3",
        "host": "vm", "cpu_model": "Intel(R) Xeon(R) Processor", "cpu_count": 16, "triton": "3.6.0",
        "device_name": "NVIDIA H200", "device_count": 1, "device_memory_bytes": 150109880320, "sm_count": 132,
        "compute_capability": "9.0", "l2_bytes": 62914560, "driver": "580.159.04",
        "hardware_fingerprint": "18a41b7fa522df03", "software_fingerprint": "ab8cd860b2134d09"}


def _bundled_run(tmp_path: Path, name: str, hardware: dict) -> tuple[str, object]:
    """A bundled run of L1/1-2 on the CPU in a store under ``tmp_path``, with L1/1 evaluated and the run
    interrupted, as a killed runner leaves it; returns (db URL, its RunConfig)."""
    from kernelbench_harness import runner
    from kernelbench_harness.adapters.registry import get_adapter
    from kernelbench_harness.core import EvalResult, Outcome
    from kernelbench_harness.problems import load_problems
    from kernelbench_harness.store import Store

    db = f"sqlite:///{tmp_path / 'kb.db'}"
    cfg = runner.RunConfig(model="bundled", levels=(1,), ids="1-2", run_name=name, db=db, gpus="cpu",
                           build_cache=str(tmp_path / "cache"), timeout_s=120, protocol_overrides=SHORT_TIMING)
    problems = load_problems(None, levels=(1,), ids="1-2").problems
    specs = get_adapter("bundled", options={"device": "cpu"}).plan(problems, 1)
    with Store(db) as st:
        st.create_run(name, model="bundled", protocol=cfg.resolved_protocol().to_dict(),
                      config={"run_config": cfg.to_dict(), "run_seed": 1}, hardware=hardware, problems=problems)
        sp = next(s for s in specs if s.problem.problem_id == 1)
        st.record_attempt(name, problem=sp.problem, candidate=None, model=sp.model, sample_id=sp.sample_id,
                          turn=0, messages=None, reply=None, generation=None,
                          result=EvalResult(Outcome.CORRECT, compiled=True, correct=True))
        st.set_run_status(name, "interrupted")
    return db, cfg


def test_resume_on_other_hardware_is_refused_before_any_device_worker_starts(tmp_path, monkeypatch):
    """A run timed on an H200, resumed on this CPU machine, is refused before any device worker starts, naming
    what differs and what to do; its hardware record, status and results are left as they were (before: the
    missing candidate was evaluated on the CPU and the run's record rewritten to the CPU's)."""
    import asyncio

    import torch

    from kernelbench_harness import runner
    from kernelbench_harness.errors import ConfigError
    from kernelbench_harness.store import Store

    db, cfg = _bundled_run(tmp_path, "h200", H200)

    def started(*_a, **_k):
        raise AssertionError("a device worker (or the sizing child) was started")

    monkeypatch.setattr(runner, "_make_executor", started)
    monkeypatch.setattr(runner, "_start_sizing", started)
    with pytest.raises(ConfigError) as e:
        asyncio.run(runner.execute_run(cfg, resume=True))
    msg = e.value.message
    assert "run 'h200' was timed on NVIDIA H200, torch 2.11.0+cu130, CUDA 13.0; this machine differs" in msg, msg
    assert "device_type: cuda (run) vs cpu (here)" in msg and "cuda: 13.0 (run) vs" in msg
    assert f"torch: 2.11.0+cu130 (run) vs {torch.__version__} (here)" in msg
    assert "same kind of machine" in e.value.fix and "new --run-name" in e.value.fix
    out = kbench("run", "--run-name", "h200", "--resume", "--db", db, "--display", "plain", "--no-report",
                 cwd=tmp_path, check=False)
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    assert "error: run 'h200' was timed on NVIDIA H200" in out.stderr and "fix: resume it on the same kind" in out.stderr
    assert "Traceback" not in out.stderr
    with Store(db) as st:
        info = st.get_run("h200")
        assert info is not None and info.hardware == H200 and info.status == "interrupted"
        assert len(st.attempts("h200")) == 1


def test_a_resume_keeps_the_runs_hardware_record_and_checks_what_the_workers_report(tmp_path):
    """A stack that only the device workers read (triton here) and that differs from the run's is refused once
    they start, before anything is evaluated; on a machine like the run's, the resumed part evaluates the rest,
    and the run's hardware record stays the one it was started on, with this part's machine listed under
    ``resumed`` (before: the record was replaced by this machine's)."""
    import asyncio

    from kernelbench_harness import runner
    from kernelbench_harness.errors import ConfigError
    from kernelbench_harness.hardware import collect_fingerprint
    from kernelbench_harness.store import Store

    first = {**collect_fingerprint("cpu"), "host": "first-machine", "clocks_end": ["at the first part's end"]}
    db, cfg = _bundled_run(tmp_path, "same", {**first, "triton": "0.0.1-another"})
    with pytest.raises(ConfigError) as e:
        asyncio.run(runner.execute_run(cfg, resume=True))
    assert "triton: 0.0.1-another (run) vs" in e.value.message, e.value.message
    with Store(db) as st:
        info = st.get_run("same")
        assert len(st.attempts("same")) == 1 and info is not None and info.hardware["triton"] == "0.0.1-another"
    with sqlite3.connect(tmp_path / "kb.db") as c:  # the run's record as a machine like this one stored it
        c.execute("update runs set hardware = ? where run_name = 'same'", (json.dumps(first),))
    s = asyncio.run(runner.execute_run(cfg, resume=True))
    assert (s.evaluated, s.skipped_done, s.status) == (1, 1, "finished")
    with Store(db) as st:
        hw = st.get_run("same").hardware  # type: ignore[union-attr]
    parts = hw.pop("resumed")
    assert hw == first
    assert [p["host"] for p in parts] == [socket.gethostname()] and parts[0]["device"] == "cpu"


def _relative_inputs(root: Path) -> tuple[str, str]:
    """``root/.data``: a problem folder (L1/1, L1/4) and a replay file ``gens.jsonl`` of model ``m`` answering both;
    returns their paths relative to ``root``."""
    repo = Path(__file__).resolve().parents[2]
    (root / ".data" / "problems" / "level1").mkdir(parents=True)
    lines = []
    for name in ("1_Scaled_Swish", "4_Row_Sum"):
        (root / ".data" / "problems" / "level1" / f"{name}.py").write_text(
            (repo / "problems" / "level1" / f"{name}.py").read_text())
        code = (repo / "problems" / "solutions" / "level1" / f"{name}.triton.py").read_text()
        lines.append(json.dumps({"level": 1, "problem_id": int(name.split("_")[0]), "model": "m", "code": code}))
    (root / ".data" / "gens.jsonl").write_text("\n".join(lines) + "\n")
    return ".data/problems", "replay:.data/gens.jsonl"


def test_resume_reads_moved_inputs_of_a_run_stored_with_relative_paths(tmp_path, monkeypatch):
    """A run stored with relative --problems and replay paths, resumed from another folder: without paths it is
    refused with the flags to pass; re-pointed to the same problems and file elsewhere, it evaluates the rest
    under the same model; a re-point to other problems, another file or other code is refused before any device
    worker starts (before: the new paths were ignored and the stored ones failed, with no fix)."""
    import asyncio

    from kernelbench_harness import runner
    from kernelbench_harness.core import Candidate, EvalResult, Outcome
    from kernelbench_harness.errors import ConfigError
    from kernelbench_harness.hardware import collect_fingerprint
    from kernelbench_harness.problems import load_problems
    from kernelbench_harness.store import Store

    start = tmp_path / "start"
    problems_rel, model_rel = _relative_inputs(start)
    db = f"sqlite:///{tmp_path / 'kb.db'}"
    saved = runner.RunConfig(model=model_rel, problems=problems_rel, levels=(1,), run_name="rel", db=db, gpus="cpu",
                             build_cache=str(tmp_path / "cache"), timeout_s=120, protocol_overrides=SHORT_TIMING)
    problems = load_problems(start / problems_rel).problems
    gens = [json.loads(x) for x in (start / ".data" / "gens.jsonl").read_text().splitlines()]
    with Store(db) as st:  # as a kbench that stored paths as given left it, cut after L1/1
        st.create_run("rel", model=model_rel, protocol=saved.resolved_protocol().to_dict(),
                      config={"run_config": saved.to_dict(), "run_seed": 1}, hardware=collect_fingerprint("cpu"),
                      problems=problems)
        st.record_attempt("rel", problem=problems[0], candidate=Candidate(1, 1, gens[0]["code"], model="m"), model="m",
                          sample_id=0, turn=0, messages=None, reply=None, generation=None,
                          result=EvalResult(Outcome.CORRECT, compiled=True, correct=True))
        st.set_run_status("rel", "interrupted")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    starts: list[int] = []
    real = runner._make_executor

    def counted(*a, **k):
        starts.append(1)
        return real(*a, **k)

    monkeypatch.setattr(runner, "_make_executor", counted)
    notes: list[str] = []

    class Notes(runner._NullProgress):
        def note(self, message: str) -> None:
            notes.append(message)

    def resume(problems_path: Path | None = None, gens_path: Path | None = None) -> runner.RunSummary:
        given = runner.RunConfig(run_name="rel", db=db, gpus="cpu", build_cache=str(tmp_path / "cache"),
                                 problems=None if problems_path is None else str(problems_path),
                                 model="bundled" if gens_path is None else f"replay:{gens_path}")
        explicit = frozenset(f for f, v in (("problems", problems_path), ("model", gens_path)) if v is not None)
        return asyncio.run(runner.execute_run(given, resume=True, progress=Notes(), explicit=explicit))

    with pytest.raises(ConfigError) as e:
        resume()
    assert e.value.message == (f"run 'rel' was started with --problems .data/problems and -m replay:.data/gens.jsonl, "
                               f"which are not here ({elsewhere}/.data/problems, {elsewhere}/.data/gens.jsonl)")
    assert e.value.fix.startswith("pass --problems <folder> -m replay:<folder>/gens.jsonl where they are now")

    moved = tmp_path / "moved"
    shutil.copytree(start / ".data", moved)
    edited = tmp_path / "edited"  # L1/1 with other code: other problems
    shutil.copytree(moved, edited)
    p1 = edited / "problems" / "level1" / "1_Scaled_Swish.py"
    p1.write_text(p1.read_text().replace("scale = 1.75", "scale = 2.0"))
    with pytest.raises(ConfigError, match=r"--problems .*edited/problems does not hold 1 of the 2 problem\(s\) of "
                                          r"run 'rel' \(same level, id and code\): L1/1"):
        resume(edited / "problems", moved / "gens.jsonl")
    with pytest.raises(ConfigError, match=r"-m replay:.*nowhere/gens.jsonl: no such file or folder"):
        resume(moved / "problems", tmp_path / "nowhere" / "gens.jsonl")
    (moved / "other.jsonl").write_text((moved / "gens.jsonl").read_text())
    with pytest.raises(ConfigError, match="a resume may take the same file from another folder, not another file"):
        resume(moved / "problems", moved / "other.jsonl")
    (edited / "gens.jsonl").write_text((moved / "gens.jsonl").read_text().replace("torch", "torch ", 1))
    with pytest.raises(ConfigError, match=r"does not hold the code run 'rel' stored for 1 candidate\(s\): L1/1 m "
                                          r"sample 0"):
        resume(moved / "problems", edited / "gens.jsonl")
    assert starts == []

    s = resume(moved / "problems", moved / "gens.jsonl")
    assert (s.evaluated, s.skipped_done, s.status, len(starts)) == (1, 1, "finished", 1)
    assert any(n.startswith("--resume of run 'rel' reads its inputs where they are now") for n in notes), notes
    with Store(db) as st:
        assert [(a.problem_id, a.model, a.sample_id) for a in st.attempts("rel")] == [(1, "m", 0), (4, "m", 0)]
        info = st.get_run("rel")
    assert info is not None and info.model == model_rel  # the run is the one it was
    assert (info.config["run_config"]["problems"], info.config["run_config"]["model"]) == (problems_rel, model_rel)


def test_a_new_run_stores_its_input_paths_absolute(tmp_path, monkeypatch):
    """``--problems`` and ``-m replay:`` given as relative paths are stored absolute in the run's settings, so
    ``--resume`` finds them from any folder; the model keeps the name it was given."""
    import asyncio

    from kernelbench_harness import runner
    from kernelbench_harness.store import Store

    start = tmp_path / "start"
    problems_rel, model_rel = _relative_inputs(start)
    db = f"sqlite:///{tmp_path / 'kb.db'}"
    cfg = runner.RunConfig(model=model_rel, problems=problems_rel, levels=(1,), ids="1", run_name="abs", db=db,
                           gpus="cpu", build_cache=str(tmp_path / "cache"), timeout_s=120,
                           protocol_overrides=SHORT_TIMING)
    monkeypatch.chdir(start)
    assert asyncio.run(runner.execute_run(cfg)).evaluated == 1
    with Store(db) as st:
        info = st.get_run("abs")
    assert info is not None and info.model == model_rel
    stored = info.config["run_config"]
    assert (stored["problems"], stored["model"]) == (str(start / ".data" / "problems"),
                                                    f"replay:{start / '.data' / 'gens.jsonl'}")
    notes: list[str] = []

    class Notes(runner._NullProgress):
        def note(self, message: str) -> None:
            notes.append(message)

    # the same relative paths typed again from where the run started are the stored ones (nothing "ignored")
    s = asyncio.run(runner.execute_run(cfg, resume=True, progress=Notes(), explicit=frozenset({"problems", "model"})))
    assert s.evaluated == 0 and notes == ["nothing to evaluate: the 1 sample(s) of run abs are complete"], notes
    monkeypatch.chdir(tmp_path)  # and from another folder, with no path given
    s = asyncio.run(runner.execute_run(runner.RunConfig(run_name="abs", db=db, gpus="cpu"), resume=True))
    assert s.evaluated == 0 and s.skipped_done == 1
