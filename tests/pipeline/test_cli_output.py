"""What the CLI prints: a bad ``kbench run`` argument prints its error alone, and tables written to a
pipe keep long cells whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernelbench_harness.cli import cli
from kernelbench_harness.core import Backend, Candidate, EvalResult, Outcome, Problem
from kernelbench_harness.errors import ConfigError, KbenchError
from kernelbench_harness.protocols import get_protocol
from kernelbench_harness.store import Store

REPO = Path(__file__).resolve().parents[2]

# longer than the 80 columns rich assumes when stdout is not a terminal
LONG_RUN = "sweep-" + "-".join(f"part{i:02d}" for i in range(14))
LONG_MODEL = "local/" + "qwen-kernel-rl-" * 6 + "checkpoint-final"
LONG_NAME = "Conv3d_" + "_".join(["GroupNorm", "HardSwish", "Mean", "Softmax"] * 5)
LONG_ERROR = "RuntimeError: " + " ".join(f"dim{i}" for i in range(30)) + " mismatch"
assert min(map(len, (LONG_RUN, LONG_MODEL, LONG_NAME, LONG_ERROR))) > 90


# --- 1. a bad argument prints only its error -------------------------------------------------------


def _bad_run(tmp_path: Path, display: str, *args: str):  # type: ignore[no-untyped-def]
    db = f"sqlite:///{tmp_path / 'k.db'}"
    return CliRunner().invoke(cli, ["run", "--db", db, "--display", display, "--no-report", *args])


@pytest.mark.parametrize("display", ["plain", "rich"])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--level", "9"), "no problems selected"),
        (("--model", "no-such-model"), "unknown model"),
        (("--problems", "/no/such/KernelBench"), "no such file or folder"),
        (("--ids", "1-x"), "bad id list"),
        (("--model", "replay:/no/such/gens.jsonl"), "does not exist"),
        (("--run-name", "never-made", "--resume"), "no run named"),
    ],
)
def test_a_bad_run_argument_prints_nothing_before_its_error(tmp_path, display, args, message):
    res = _bad_run(tmp_path, display, *args)
    assert isinstance(res.exception, KbenchError), res.output
    assert message in res.exception.message and res.exception.fix
    assert res.output == ""  # no progress line ("generate 0/0 ...") or bars drawn before the error


def test_a_missing_problem_source_names_the_accepted_sources(tmp_path):
    res = _bad_run(tmp_path, "plain", "--problems", str(tmp_path / "KernelBench"))
    assert isinstance(res.exception, ConfigError)
    assert "--problems" in res.exception.message and "hf:ScalingIntelligence/KernelBench" in res.exception.fix
    listed = CliRunner().invoke(cli, ["problems", "list", "--problems", str(tmp_path / "nope.jsonl")])
    assert isinstance(listed.exception, ConfigError) and listed.output == ""


def test_the_command_line_shows_the_error_and_its_fix_alone(tmp_path):
    p = subprocess.run([sys.executable, "-m", "kernelbench_harness", "run", "--model", "no-such-model",
                        "--db", f"sqlite:///{tmp_path / 'k.db'}", "--no-report"],
                       cwd=tmp_path, text=True, capture_output=True, timeout=120, check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines()[0] == "error: unknown model 'no-such-model'"
    assert p.stderr.splitlines()[1].startswith("  fix: use one of:")


def test_progress_is_drawn_once_the_runner_reports_work(capsys):
    from kernelbench_harness.cli.run_cmd import PlainProgress

    with PlainProgress():
        pass
    assert capsys.readouterr().out == ""
    with PlainProgress() as prog:
        prog.total("verify", 2)
        prog.advance("verify")
    assert "verify 1/2" in capsys.readouterr().out


# --- 2. tables in a pipe keep whole cells ----------------------------------------------------------


def _problem(name: str) -> Problem:
    code = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
            "        return torch.relu(x)\n\ndef get_inputs():\n    return [torch.rand(4)]\n\n"
            "def get_init_inputs():\n    return []\n")
    return Problem(1, 1, name, code, source=f"synthetic/level1/1_{name}.py")


@pytest.fixture
def wide_db(tmp_path: Path) -> str:
    db = f"sqlite:///{tmp_path / 'wide.db'}"
    p = _problem(LONG_NAME)
    hw = {"device_type": "cuda", "device_name": "NVIDIA H200", "hardware_fingerprint": "hw-1",
          "software_fingerprint": "sw-1"}
    with Store(db) as st:
        st.create_run(LONG_RUN, model=LONG_MODEL, protocol=get_protocol("kbench").to_dict(), config={},
                      hardware=hw, problems=[p])
        code = "class ModelNew: pass\n"
        st.record_attempt(LONG_RUN, problem=p, model=LONG_MODEL, sample_id=0, turn=0, messages=None, reply=None,
                          generation=None,
                          candidate=Candidate(1, 1, code, Backend.detect(code), 0, 0, LONG_MODEL),
                          result=EvalResult(Outcome.RUNTIME_ERROR, compiled=True, error=LONG_ERROR))
        st.set_run_status(LONG_RUN, "finished")
    return db


def _lines_with(text: str, value: str) -> list[str]:
    return [line for line in text.splitlines() if value in line]


def test_runs_list_in_a_pipe_keeps_long_names_whole(wide_db, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    res = CliRunner().invoke(cli, ["runs", "list", "--db", wide_db])
    assert res.exit_code == 0, res.output
    (row,) = _lines_with(res.output, LONG_RUN)  # one row: the name is neither cut nor folded
    assert LONG_MODEL in row and "…" not in res.output


def test_runs_list_fits_the_width_columns_asks_for(wide_db, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    res = CliRunner().invoke(cli, ["runs", "list", "--db", wide_db])
    assert res.exit_code == 0, res.output
    assert max(len(line) for line in res.output.splitlines()) <= 100
    assert not _lines_with(res.output, LONG_RUN)  # folded to fit, as asked


def test_show_in_a_pipe_keeps_the_model_and_error_whole(wide_db, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    res = CliRunner().invoke(cli, ["show", LONG_RUN, "L1/1", "--db", wide_db])
    assert res.exit_code == 0, res.output
    assert _lines_with(res.output, LONG_MODEL) and _lines_with(res.output, LONG_ERROR)
    assert "…" not in res.output


def test_problems_list_in_a_pipe_keeps_long_names_whole(tmp_path, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    src = tmp_path / "problems.jsonl"
    p = _problem(LONG_NAME)
    src.write_text(json.dumps({"level": 1, "problem_id": 1, "name": p.name, "code": p.code}) + "\n")
    res = CliRunner().invoke(cli, ["problems", "list", "--problems", str(src)])
    assert res.exit_code == 0, res.output
    assert _lines_with(res.output, LONG_NAME)


def test_models_list_in_a_pipe_keeps_long_aliases_whole(tmp_path, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    cfg = tmp_path / "kbench.toml"
    cfg.write_text(f'[aliases]\n"{LONG_MODEL.replace("/", "-")}" = "{LONG_MODEL}"\n')
    monkeypatch.setenv("KBENCH_CONFIG", str(cfg))
    res = CliRunner().invoke(cli, ["models", "list", "--offline"])
    assert res.exit_code == 0, res.output
    (row,) = _lines_with(res.output, LONG_MODEL.replace("/", "-"))
    assert LONG_MODEL in row and "about" in res.output  # the description column shows in a pipe


@pytest.mark.parametrize("device_type", ["cuda", "cpu"])
def test_the_run_summary_says_when_a_run_was_timed_on_a_cpu(tmp_path, capsys, device_type):
    from rich.console import Console

    from kernelbench_harness.cli.run_cmd import _print_summary
    from kernelbench_harness.runner import RunSummary

    from kernelbench_harness.core import TimingStats

    db = f"sqlite:///{tmp_path / 'k.db'}"
    p = _problem("ReLU")
    code = "class ModelNew: pass\n"
    slow = TimingStats(median_ms=25.0, mean_ms=25.0, std_ms=0.0, min_ms=25.0, max_ms=25.0, ci95_low_ms=25.0,
                       ci95_high_ms=25.0, n=5, samples_ms=(25.0,) * 5, timer="wall", statistic="median")
    with Store(db) as st:
        st.create_run("r", model="m", protocol=get_protocol("kbench").to_dict(), config={},
                      hardware={"device_type": device_type, "hardware_fingerprint": "hw", "software_fingerprint": "sw"},
                      problems=[p])
        st.record_attempt("r", problem=p, model="m", sample_id=0, turn=0, messages=None, reply=None, generation=None,
                          candidate=Candidate(1, 1, code, Backend.detect(code), 0, 0, "m"),
                          result=EvalResult(Outcome.CORRECT, compiled=True, correct=True, candidate=slow,
                                            eager_ms=0.05, compile_ms=0.1))
    _print_summary(Console(), RunSummary(run_name="r", db_url=db, outcomes={"correct": 1}, evaluated=1,
                                         skipped_done=0, wall_s=0.0, phase_s={}), db)
    out = capsys.readouterr().out
    assert ("timed on a CPU" in out) == (device_type == "cpu")
    assert "0.002x" in out and "0.00x" not in out  # 0.05 ms / 25 ms, not rounded away


def test_the_run_summary_in_a_pipe_keeps_the_run_name_whole(wide_db, monkeypatch, capsys):
    from rich.console import Console

    from kernelbench_harness.cli.run_cmd import _print_summary
    from kernelbench_harness.runner import RunSummary

    monkeypatch.delenv("COLUMNS", raising=False)
    summary = RunSummary(run_name=LONG_RUN, db_url=wide_db, outcomes={"runtime_error": 1}, evaluated=1,
                         skipped_done=0, wall_s=1.0, phase_s={})
    _print_summary(Console(), summary, wide_db)
    out = capsys.readouterr().out
    assert _lines_with(out, f"run {LONG_RUN}") and _lines_with(out, LONG_MODEL)
