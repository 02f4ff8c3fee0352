"""Bad command-line input gets a clear error that names the fix, and stores nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from early import Early, in_child

from kernelbench_harness.cli import cli
from kernelbench_harness.cli.common import parse_gpus, parse_levels
from kernelbench_harness.errors import ConfigError


def test_levels_parse_and_reject_level_zero_and_empty_ranges():
    assert parse_levels("1-3") == (1, 2, 3) and parse_levels("1,3") == (1, 3) and parse_levels(None) is None
    with pytest.raises(ConfigError, match="levels start at 1"):
        parse_levels("0-2")
    with pytest.raises(ConfigError, match="empty"):
        parse_levels("3-1")


def _run(tmp_path, *args):
    db = f"sqlite:///{tmp_path / 'k.db'}"
    return CliRunner().invoke(cli, ["run", "--db", db, "--display", "plain", "--no-report", *args]), db


def test_a_level_the_source_lacks_names_the_levels_it_has(tmp_path):
    res, _ = _run(tmp_path, "--level", "9")
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
    assert "no problems selected" in str(res.exception) and "level(s) 1, 2, 3" in str(res.exception)
    assert not (tmp_path / "k.db").exists()  # bad input creates no database file


def test_a_gpu_this_machine_lacks_creates_no_database(tmp_path):
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1", "--gpus", "7")
    assert res.exit_code != 0 and res.exception is not None
    assert not (tmp_path / "k.db").exists()


@pytest.mark.parametrize("gpus", [",", "0,,1", "0,", "-1", "a", "cpu,0", "1.5"])
@pytest.mark.parametrize("command", ["run", "baseline"])
def test_a_gpus_list_that_is_empty_or_garbage_names_the_valid_forms(tmp_path, command, gpus):
    """`--gpus ,` and `--gpus 0,,1` were taken (on a GPU machine: no slot at all, or slots 0 and 1); `--gpus -1` and
    `--gpus a` were refused only once the run had started, with a bare 'bad --gpus value'."""
    db = f"sqlite:///{tmp_path / 'k.db'}"
    res = CliRunner().invoke(cli, [command, "--db", db, "--level", "1", "--ids", "1", f"--gpus={gpus}"])
    assert isinstance(res.exception, ConfigError), res.output
    assert f"bad --gpus value {gpus!r}" in res.exception.message
    assert "--gpus 0,1" in res.exception.fix and "--gpus cpu" in res.exception.fix
    assert not (tmp_path / "k.db").exists()


def test_valid_gpus_lists_pass_without_spaces():
    assert parse_gpus(None) is None and parse_gpus("auto") == "auto"
    assert parse_gpus(" 0, 1 ") == "0,1" and parse_gpus("0,0") == "0,0"
    assert parse_gpus("cpu") == "cpu" and parse_gpus("CPU, cpu") == "cpu,cpu"
    for bad in ("", " ", "²", "0,auto"):
        with pytest.raises(ConfigError):
            parse_gpus(bad)


def test_unknown_bundled_options_are_refused_before_anything_is_stored(tmp_path):
    """-O varient=cuda (a typo) was ignored with a log line: the run went on with the default variant."""
    res, _ = _run(tmp_path, "-O", "varient=cuda", "--level", "1", "--ids", "1", "--gpus", "cpu")
    assert isinstance(res.exception, ConfigError), res.output
    assert "varient" in res.exception.message and "device, variant" in res.exception.message
    assert "-O variant=" in res.exception.fix
    assert not (tmp_path / "k.db").exists()


def test_an_unusable_model_creates_no_database_and_a_taken_name_is_still_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    res, db = _run(tmp_path, "--model", "anthropic/claude-x", "--level", "1", "--ids", "1")
    assert res.exit_code != 0 and "ANTHROPIC_API_KEY" in str(res.exception) + res.output
    assert not (tmp_path / "k.db").exists()
    from kernelbench_harness.store import Store

    with Store(db) as st:
        st.create_run("taken", model="bundled", protocol={"name": "kbench"}, config={}, hardware={}, problems=[])
    again, _ = _run(tmp_path, "--level", "1", "--ids", "1", "--run-name", "taken", "--gpus", "cpu")
    assert again.exit_code != 0 and "already exists" in str(again.exception)
    with Store(db) as st:
        assert [r.run_name for r in st.list_runs()] == ["taken"]


def test_a_replay_with_no_usable_line_is_an_error_and_stores_no_run(tmp_path):
    gens = tmp_path / "g.jsonl"
    gens.write_text(json.dumps({"level": 1, "problem_id": 1, "model": "m"}) + "\n")  # no code
    res, db = _run(tmp_path, "--model", f"replay:{gens}")
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
    assert "has no sample" in str(res.exception) and res.exception.fix
    runs = CliRunner().invoke(cli, ["runs", "list", "--db", db])
    assert "no results database" in str(runs.exception)
    assert not (tmp_path / "k.db").exists()  # nothing to evaluate creates no database file


def test_a_replay_with_nothing_to_evaluate_leaves_an_existing_database_as_it_was(tmp_path, monkeypatch):
    from kernelbench_harness.store import Store

    monkeypatch.setenv("KBENCH_BUILD_CACHE", str(tmp_path / "cache" / "build_cache"))

    db_file = tmp_path / "k.db"
    with Store(f"sqlite:///{db_file}") as st:
        st.create_run("kept", model="bundled", protocol={"name": "kbench"}, config={}, hardware={}, problems=[])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    gens = tmp_path / "g.jsonl"
    gens.write_text(json.dumps({"level": 9, "problem_id": 1, "code": "x"}) + "\n")  # no selected problem
    res, db = _run(tmp_path, "--model", f"replay:{gens}", "--level", "1", "--ids", "1", "--run-name", "new")
    assert isinstance(res.exception, ConfigError) and "nothing to evaluate" in str(res.exception)
    assert not (tmp_path / "cache").exists()  # nor a build cache folder
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p != gens} == before


def test_a_cuda_candidate_on_a_cpu_run_says_it_needs_a_gpu(tmp_path):
    from kernelbench_harness.store import Store

    res, db = _run(tmp_path, "-O", "variant=cuda", "--level", "1", "--ids", "1", "--gpus", "cpu",
                   "--run-name", "cu")
    assert res.exit_code == 0, res.output
    st = Store(db)
    try:
        (att,) = st.attempts("cu")
    finally:
        st.close()
    assert str(att.result.outcome) == "compile_error"
    if "CUDA_HOME" in att.result.error:  # torch's words when no toolkit is found
        assert "hint: this candidate compiles CUDA code and this run has no GPU" in att.result.error


def test_resume_names_the_settings_it_ignores(tmp_path, monkeypatch):
    from kernelbench_harness.cli import run_cmd
    from kernelbench_harness.runner import RunConfig, resume_differences

    saved = RunConfig(model="replay:a.jsonl", levels=(1,), samples=2, seed=7)
    given = RunConfig(model="bundled", levels=(1, 2), samples=1, seed=7)
    # only what the user typed counts; a default that differs from the stored value is not a difference
    assert resume_differences(given, saved, {"levels", "seed"}) == ["levels=(1, 2) (stored: (1,))"]
    assert resume_differences(given, saved, set()) == []

    seen = {}

    async def fake_execute_run(cfg, progress=None, adapter=None, resume=False, explicit=frozenset()):
        seen.update(explicit=explicit, resume=resume, adapter=adapter)
        raise SystemExit(0)

    monkeypatch.setattr(run_cmd, "execute_run", fake_execute_run)
    CliRunner().invoke(cli, ["run", "--run-name", "r", "--resume", "--level", "2", "--samples", "3", "-M", "t=1",
                             "--display", "plain", "--db", f"sqlite:///{tmp_path / 'k.db'}"])
    assert seen == {"explicit": frozenset({"levels", "samples", "params"}), "resume": True, "adapter": None}


def test_a_bad_reference_budget_is_refused_before_anything_is_stored(tmp_path, monkeypatch):
    # read in each device slot, a bad value would fail every candidate and store them as runtime errors
    monkeypatch.setenv("KBENCH_REF_BUDGET_BYTES", "12GB")
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1")
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
    assert "KBENCH_REF_BUDGET_BYTES='12GB'" in str(res.exception) and "number of bytes" in res.exception.fix
    assert not (tmp_path / "k.db").exists()


def test_a_bad_devshare_switch_is_refused_before_anything_is_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_DEVSHARE", "maybe")
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1")
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
    assert "KBENCH_DEVSHARE='maybe'" in str(res.exception) and "KBENCH_DEVSHARE=0" in res.exception.fix
    assert not (tmp_path / "k.db").exists()
    for off in ("0", "off", "False"):
        monkeypatch.setenv("KBENCH_DEVSHARE", off)
        from kernelbench_harness.execution import devshare

        assert devshare.enabled() is False


@pytest.mark.parametrize("name,value,fix", [
    ("KBENCH_SANDBOX_LAYERS", "netns,landlok", "netns, landlock, caps, seccomp"),  # a typo: landlock off
    ("KBENCH_SANDBOX_LAYERS", "bogus", "netns, landlock, caps, seccomp"),  # would try every layer off first
    ("KBENCH_PCH", "nah", "KBENCH_PCH=0"),
    ("KBENCH_SLIM_HEADERS", "2", "KBENCH_SLIM_HEADERS=0"),
    ("KBENCH_MEMORY_LEDGER", "maybe", "KBENCH_MEMORY_LEDGER=0"),
    ("KBENCH_START_OFF_HOLD", "sometimes", "KBENCH_START_OFF_HOLD=0"),
    ("KBENCH_COMPILE_OFF_HOLD", "auto", "KBENCH_COMPILE_OFF_HOLD=0"),
    ("KBENCH_SANDBOX_WRITE_DIRS", "proc/self", "/proc/self"),  # relative: the folder would stay unwritable
])
def test_bad_switches_are_refused_before_anything_is_stored(tmp_path, monkeypatch, name, value, fix):
    monkeypatch.setenv(name, value)
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1")
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
    assert f"{name}={value!r}" in str(res.exception) and fix in res.exception.fix
    assert not (tmp_path / "k.db").exists()


def test_a_pinned_sandbox_layer_set_switches_on_what_it_names():
    from kernelbench_harness.execution.sandbox import pinned_layers

    assert pinned_layers("") is None
    assert pinned_layers("netns, Caps") == {"new_netns": True, "landlock": False, "landlock_tcp": False,
                                             "landlock_scope": False, "drop_caps": True, "seccomp_unix": False}


def test_protocol_options_are_checked_before_anything_is_stored(tmp_path):
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1", "-P", "no_such_setting=1")
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
    assert "no_such_setting" in str(res.exception) and "protocols show" in res.exception.fix
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1", "-P", "hide_launch=maybe")
    assert isinstance(res.exception, ConfigError) and "hide_launch must be bool" in str(res.exception)
    assert re.search(r"-P hide_launch=(true|false)", res.exception.fix)
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1", "-P", "placements=0")
    assert isinstance(res.exception, ConfigError) and "placements" in str(res.exception)
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1", "-P", "placements")
    assert isinstance(res.exception, ConfigError) and "e.g. placements=4" in res.exception.fix
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1", "-P", "placements=2", "-P", "placements=3")
    assert isinstance(res.exception, ConfigError) and "given twice" in str(res.exception)
    # values, not only types: a negative time, an unknown timer, a tolerance as one value
    for bad, says in (("hide_launch_max_ms=-1", "at least 0.05"), ("timer=bogus", "one of cuda_events"),
                      ("trials=0", "at least 1"), ("tolerances=x", "map a precision to [atol, rtol]"),
                      ("fp64_multiple=inf", "finite"), ("fp64_multiple=nan", "finite"),
                      ("precision=fp16", "not a setting to change"), ("name=kernelbench", "not a setting to change")):
        res, _ = _run(tmp_path, "--level", "1", "--ids", "1", "-P", bad)
        assert isinstance(res.exception, ConfigError) and says in str(res.exception), (bad, res.output)
    assert not (tmp_path / "k.db").exists()


def _ran(res) -> tuple[int, str]:
    """What the tests below read of a finished ``CliRunner`` result (a result does not pickle)."""
    return res.exit_code, res.output


def _placements_run(tmp_path: Path) -> tuple[int, str]:
    """The run of the test below (in a child interpreter, beside the tests before it: tests/early.py)."""
    return _ran(_run(tmp_path, "--level", "1", "--ids", "1", "--run-name", "p4", "-P", "placements=2")[0])


def _replay_without_a_sample(tmp_path: Path) -> tuple[int, str]:
    """The run of test_problems_without_a_sample_are_named_in_the_summary (in a child interpreter, beside the
    tests before it: tests/early.py)."""
    from .conftest import SHORT_TIMING_ARGS

    root = Path(__file__).resolve().parents[2]
    code = (root / "problems" / "solutions" / "level1" / "1_Scaled_Swish.triton.py").read_text()
    gens = tmp_path / "g.jsonl"
    gens.write_text(json.dumps({"level": 1, "problem_id": 1, "model": "m", "code": code}) + "\n"
                    + '{"level": 1, "problem_id": 2, "code": "broken\n')
    return _ran(_run(tmp_path, "--model", f"replay:{gens}", "--level", "1", "--ids", "1-2", "--gpus", "cpu",
                     "--run-name", "r", *SHORT_TIMING_ARGS)[0])


# queued when the session is collected (tests/early.py)
EARLY = {"placements_run": Early(in_child(_placements_run)),
         "replay_without_a_sample": Early(in_child(_replay_without_a_sample))}


@pytest.fixture
def placements_run() -> tuple[int, str]:
    return EARLY["placements_run"].result()


@pytest.fixture
def replay_without_a_sample() -> tuple[int, str]:
    return EARLY["replay_without_a_sample"].result()


def test_a_protocol_option_is_stored_with_the_run_under_its_own_fingerprint(placements_run):
    import json
    import sqlite3
    from types import SimpleNamespace

    from kernelbench_harness.protocols import get_protocol

    tmp_path = EARLY["placements_run"].folder
    res = SimpleNamespace(exit_code=placements_run[0], output=placements_run[1])
    assert res.exit_code == 0, res.output
    assert "run p4 (kbench (placements=2), fp32)" in res.output  # the end-of-run table names the change
    assert "only the GPU timer" in " ".join(res.output.split())  # and a CPU run says it changes nothing here
    con = sqlite3.connect(tmp_path / "k.db")
    proto, fp = con.execute("select protocol, protocol_fingerprint from runs where run_name='p4'").fetchone()
    assert json.loads(proto)["placements"] == 2
    assert fp == get_protocol("kbench", placements=2).fingerprint() != get_protocol("kbench").fingerprint()
    (extra,) = con.execute("select extra from results").fetchone()
    assert json.loads(extra)["timing_info"]["placements"] == 2  # the candidate was timed that way
    con.close()
    # reports name the change wherever the protocol is shown, so a reader never takes it for plain kbench
    from kernelbench_harness.reporting.data import build_run_data
    from kernelbench_harness.store import Store

    with Store(f"sqlite:///{tmp_path / 'k.db'}") as store:
        run = build_run_data(store, "p4", n_resamples=10)["run"]
    assert run["protocol_changes"] == ["placements=2"] and run["protocol_label"] == "kbench (placements=2)"


def test_protocol_changes_name_what_differs_from_the_named_protocol():
    from kernelbench_harness.protocols import get_protocol
    from kernelbench_harness.reporting.data import protocol_changes, protocol_label

    assert protocol_changes("kbench", "fp32", get_protocol("kbench").to_dict()) == []
    changed = get_protocol("kbench", hide_launch=False, trials=7).to_dict()
    assert protocol_changes("kbench", "fp32", changed) == ["trials=7", "hide_launch=false"]
    old = get_protocol("kernelbench").to_dict()
    old.pop("warmup_ms")  # a store from before the field: kernelbench's rules then are its rules now
    assert protocol_changes("kernelbench", "fp32", old) == []
    assert protocol_changes("no-such", "fp32", {}) == [] and protocol_label("kbench", []) == "kbench"


def test_protocols_show_explains_every_setting():
    from kernelbench_harness.protocols import Protocol, get_protocol, setting_descriptions

    about = setting_descriptions()
    assert set(about) == set(Protocol.__dataclass_fields__)
    assert all(about.values()), [k for k, v in about.items() if not v]
    assert about["l2_flush_bytes"] == "see l2_flush" and "spin" in about["hide_launch"]
    res = CliRunner().invoke(cli, ["protocols", "show", "kernelbench"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "correct_trials" in res.output and "number of correctness trials" in res.output
    assert "-P KEY=VALUE" in res.output
    res = CliRunner().invoke(cli, ["protocols", "show", "kbench", "--json"])
    assert res.exit_code == 0
    doc = json.loads(res.output)  # nothing but JSON
    assert doc["settings"] == get_protocol("kbench").to_dict() and doc["fingerprint"] == get_protocol("kbench").fingerprint()
    res = CliRunner().invoke(cli, ["protocols", "show", "--json"])
    assert [d["name"] for d in json.loads(res.output)] == ["kbench", "kernelbench", "cuda-agent"]
    res = CliRunner().invoke(cli, ["protocols", "show"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and ":mod:" not in res.output and "cuda-agent" in res.output


def test_protocols_show_on_an_80_column_terminal_gives_each_setting_full_lines():
    """At 80 columns the table squeezed values and meanings into a few characters a line (a newcomer could not read
    it): each setting is then a block, its value(s) on one line and its meaning on full lines below."""
    res = CliRunner().invoke(cli, ["protocols", "show"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert 'seed_policy = kbench "secret"; kernelbench "fixed"; cuda-agent "secret"' in lines
    assert 'correct_trials = 5 (in all)' in lines
    at = lines.index('correct_trials = 5 (in all)')
    assert lines[at + 1].strip() == "number of correctness trials (fresh inputs each)."
    assert "┃" not in res.output and "-P KEY=VALUE" in res.output
    one = CliRunner().invoke(cli, ["protocols", "show", "kernelbench"], env={"COLUMNS": "80"})
    assert 'seed_policy = "fixed"' in one.output.splitlines()


def test_tolerances_can_be_changed_per_precision_with_json():
    from kernelbench_harness.protocols import Tolerance, get_protocol

    p = get_protocol("kbench", "fp32", tolerances='{"fp32": [1e-3, 2e-3]}')
    assert p.tolerances["fp32"] == Tolerance(1e-3, 2e-3)
    assert p.tolerances["fp16"] == get_protocol("kbench").tolerances["fp16"]  # the others stay
    assert p.fingerprint() != get_protocol("kbench").fingerprint()
    for bad in ('{"fp8": [1, 1]}', '{"fp32": [-1, 1]}', '{"fp32": [1]}', "[]", '{"fp32": [NaN, 1]}'):
        with pytest.raises(ConfigError):
            get_protocol("kbench", "fp32", tolerances=bad)


def test_baseline_command_reports_a_dead_worker_in_its_row_and_goes_on(tmp_path, monkeypatch):
    from kernelbench_harness.core import TimingStats
    from kernelbench_harness.executors.local import LocalExecutor

    async def measure(self, problem, protocol, run_seed, modes):
        if problem.problem_id == 1:  # as when the OS kills the slot's worker for memory
            raise RuntimeError("baseline measurement failed on cpu: device worker died (exit code -9):")
        st = TimingStats(2.0, 2.0, 0.0, 2.0, 2.0, 2.0, 2.0, 3, (2.0, 2.0, 2.0), "wall", "median")
        return {m: st for m in modes}, {}, {}

    monkeypatch.setattr(LocalExecutor, "measure_baselines", measure)
    db = f"sqlite:///{tmp_path / 'b.db'}"
    res = CliRunner().invoke(cli, ["baseline", "--level", "1", "--ids", "1,2", "--db", db], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in res.output.splitlines() if ln.startswith("│")]
    by_id = {(r[1], r[3]): r for r in rows}
    for mode in ("eager", "compile:default"):
        assert by_id[("1", mode)][4] == "-" and "killed from outside" in by_id[("1", mode)][6], res.output
        assert by_id[("2", mode)][4] == "2" and by_id[("2", mode)][6] == "", res.output  # the next problem goes on


def test_local_executor_options_with_ray_are_refused_before_anything_is_stored(tmp_path):
    for extra in (["--slots-per-gpu", "2"], ["--quiet-host"]):
        res, _ = _run(tmp_path, "--executor", "ray", "--gpus", "cpu", *extra)
        assert res.exit_code == 2, res.output
        assert "local executor" in res.output and "--executor local" in res.output
        assert not (tmp_path / "k.db").exists()  # nothing stored


def test_an_unusable_build_cache_folder_is_a_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("KBENCH_BUILD_CACHE", str(blocker / "cache"))  # under a file: cannot be made
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1")
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
    assert "build cache folder" in str(res.exception) and "KBENCH_BUILD_CACHE" in res.exception.fix
    assert not (tmp_path / "k.db").exists()  # refused before the store is made


def test_problems_without_a_sample_are_named_in_the_summary(replay_without_a_sample):
    """A replay line that is skipped (bad JSON) leaves its problem without a sample: it counts as not solved,
    and the run says so instead of only lowering the score."""
    from types import SimpleNamespace

    res = SimpleNamespace(exit_code=replay_without_a_sample[0], output=replay_without_a_sample[1])
    db = f"sqlite:///{EARLY['replay_without_a_sample'].folder / 'k.db'}"  # where _run put the store
    assert res.exit_code == 0, res.output
    assert "1 problem(s) have no sample from the model and count as not solved: L1/2" in res.output
    # `kbench show` of the problem without a sample names the ones that have samples
    from kernelbench_harness.errors import StoreError

    shown = CliRunner().invoke(cli, ["show", "r", "L1/2", "--db", db], standalone_mode=False)
    assert isinstance(shown.exception, StoreError) and "the run has samples for L1/1" in shown.exception.fix


def test_verbose_after_the_subcommand_works_as_before_it(tmp_path):
    import logging

    root = logging.getLogger()
    saved = root.level
    try:
        root.setLevel(logging.WARNING)
        res, _ = _run(tmp_path, "-v", "--level", "9")  # fails on the level, after -v was taken
        assert "No such option" not in res.output and isinstance(res.exception, ConfigError)
        assert root.level == logging.INFO
    finally:
        root.setLevel(saved)



@pytest.mark.parametrize("columns", [None, "80"])
@pytest.mark.parametrize("name", [None, "kbench", "kernelbench"])
def test_protocols_show_in_a_pipe_fits_80_columns_and_keeps_each_fingerprint_whole(monkeypatch, columns, name):
    """Piped with $COLUMNS unset, rich took its width from a terminal on stdin or stderr (a 200-column one here):
    the output came out as the wide table, over 80 columns; and the header broke between a protocol's name and its
    fingerprint. Now a pipe without $COLUMNS gets 80 columns, and each fingerprint is on one line beside its name."""
    import os

    from kernelbench_harness.protocols import PROTOCOL_NAMES, get_protocol

    monkeypatch.setattr(os, "get_terminal_size", lambda fd=1: os.terminal_size((200, 50)))
    env = {"COLUMNS": columns, "FORCE_COLOR": None, "TTY_COMPATIBLE": None, "TTY_INTERACTIVE": None}
    res = CliRunner().invoke(cli, ["protocols", "show", *([name] if name else [])], env=env)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    for n in [name] if name else PROTOCOL_NAMES:
        fp = get_protocol(n).fingerprint()
        assert [line for line in lines if fp in line and n in line.split()], (n, fp, lines[:6])
    assert "correct_trials" in res.output and "-P KEY=VALUE" in res.output


def test_a_file_that_is_not_a_kbench_store_is_refused_and_gets_no_kbench_tables(tmp_path):
    """--db naming a file that is not an SQLite database gave a traceback (sqlite3's DatabaseError); one naming
    another program's SQLite file had kbench's tables written into it; one whose folder could not be made gave
    a traceback (mkdir's OSError). Each is now an error whose fix names --db, and the file is left without them."""
    import sqlite3

    from kernelbench_harness.errors import StoreError

    junk = tmp_path / "notes.db"
    junk.write_text("not a database\n")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE runs (x)")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for db in (junk, other):
        res = CliRunner().invoke(cli, ["runs", "list", "--db", str(db)])
        assert isinstance(res.exception, StoreError), res.output
        assert "--db" in res.exception.fix and "server" not in res.exception.fix
    assert junk.read_text() == "not a database\n"
    with sqlite3.connect(other) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["runs"]
    res, _ = _run(tmp_path, "--level", "1", "--ids", "1", "--gpus", "cpu", "--db", str(blocker / "sub" / "k.db"))
    assert isinstance(res.exception, StoreError), res.output
    assert "cannot create the folder" in str(res.exception) and "--db" in res.exception.fix


def test_an_output_folder_that_cannot_be_written_is_an_error_naming_the_fix(tmp_path, monkeypatch, capsys):
    """`kbench report/leaderboard/export --out` in a folder that cannot be made (under a file here; read-only or
    not permitted alike) ended in mkdir's traceback. The console entry point now prints the path and the fix."""
    from kernelbench_harness.cli import main
    from kernelbench_harness.store import Store

    db = str(tmp_path / "k.db")
    with Store(db) as st:
        st.create_run("r", model="bundled", protocol={"name": "kbench"}, config={}, hardware={}, problems=[])
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for args in (["report", "r"], ["leaderboard"], ["export", "r"]):
        monkeypatch.setattr("sys.argv", ["kbench", *args, "--db", db, "--out", str(blocker / "out")])
        with pytest.raises(SystemExit) as ex:
            main()
        err = capsys.readouterr().err
        assert ex.value.code == 2 and "Traceback" not in err, err
        assert f"cannot write {blocker / 'out'}" in err and "fix: pass a path in a folder you can write" in err
    assert blocker.read_text() == ""


def test_adapter_options_of_the_wrong_type_are_refused_with_a_fix(tmp_path, monkeypatch):
    """-O base_url=5 (or base_url = 5 under an alias in kbench.toml) ended in AttributeError's traceback
    ('int' object has no attribute 'rstrip'); -O without '=' showed a -M example as its fix."""
    monkeypatch.chdir(tmp_path)  # no kbench.toml of the checkout's
    res, _ = _run(tmp_path, "-m", "local/x", "-O", "base_url=5", "--level", "1", "--ids", "1")
    assert isinstance(res.exception, ConfigError), res.output
    assert "base_url must be a string" in str(res.exception) and "-O base_url=http" in res.exception.fix
    (tmp_path / "kbench.toml").write_text('[aliases.mine]\nspec = "local/x"\nbase_url = 5\n')
    res, _ = _run(tmp_path, "-m", "mine", "--level", "1", "--ids", "1")
    assert isinstance(res.exception, ConfigError) and "base_url must be a string" in str(res.exception)
    res, _ = _run(tmp_path, "-m", "openai/x", "-O", "max_concurrency=many", "--level", "1", "--ids", "1")
    assert isinstance(res.exception, ConfigError) and res.exception.fix == "pass e.g. -O max_concurrency=4"
    res, _ = _run(tmp_path, "-O", "variant", "--level", "1", "--ids", "1")
    assert isinstance(res.exception, ConfigError) and "-O value as key=value, e.g. variant=" in res.exception.fix
    assert not (tmp_path / "k.db").exists()


def test_replay_lines_for_problems_the_source_lacks_are_named(tmp_path):
    """A replay line for L1/99 against a source without it was dropped with an INFO log only (unseen without -v):
    generations replayed against the wrong --problems vanished from the run without a word. The run now names
    them (lines for levels or ids that --level/--ids leave out are not named: they were not asked for)."""
    from kernelbench_harness.adapters.replay import ReplayAdapter
    from kernelbench_harness.problems import load_problems
    from kernelbench_harness.runner import RunConfig, _stray_generations

    gens = tmp_path / "g.jsonl"
    gens.write_text("".join(json.dumps({"level": lv, "problem_id": pid, "code": "x"}) + "\n"
                            for lv, pid in ((1, 1), (1, 99), (2, 1), (7, 1))))
    ad = ReplayAdapter(gens)
    for levels, ids, want in ((None, None, ["L1/99 (line 2)", "L7/1 (line 4)"]), ((1,), None, ["L1/99 (line 2)"]),
                              ((1, 2), "1-5", [])):
        problems = list(load_problems(None, levels=levels, ids=ids).problems)
        assert _stray_generations(ad, problems, RunConfig(levels=levels, ids=ids)) == want


@pytest.mark.parametrize("option", ["--timeout", "--budget"])
def test_problems_audit_refuses_a_time_limit_that_is_not_positive(tmp_path, option):
    """`kbench problems audit --timeout -5` was taken: every problem came out skipped-time, as if too slow."""
    out = tmp_path / "a.json"
    res = CliRunner().invoke(cli, ["problems", "audit", "--level", "1", "--ids", "1", option, "-5", "--out", str(out)])
    assert res.exit_code == 2 and option in res.output and "x>0" in res.output, res.output
    assert not out.exists() and not (tmp_path / "a.json.progress.jsonl").exists()


@pytest.mark.parametrize("option", ["--timeout", "--budget", "--launch-bound-us"])
@pytest.mark.parametrize("value", ["nan", "inf", "NaN", "1e400"])
def test_problems_audit_refuses_limits_that_are_not_finite(tmp_path, option, value):
    """`--timeout nan` came out skipped-time for every problem, `--launch-bound-us nan` flagged nothing, and
    `--timeout inf` ended in an OverflowError traceback."""
    out = tmp_path / "a.json"
    res = CliRunner().invoke(cli, ["problems", "audit", "--level", "1", "--ids", "1", option, value, "--out", str(out)])
    assert res.exit_code == 2 and option in res.output and "not a finite number" in res.output, res.output
    assert not out.exists() and not (tmp_path / "a.json.progress.jsonl").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-5", "0", "lots"])
def test_problems_audit_refuses_a_max_elements_that_is_not_a_positive_number(tmp_path, value):
    """`--max-elements inf` was an OverflowError traceback, and `--max-elements -5` skipped every problem."""
    out = tmp_path / "a.json"
    res = CliRunner().invoke(cli, ["problems", "audit", "--level", "1", "--ids", "1", "--max-elements", value,
                                   "--out", str(out)])
    assert isinstance(res.exception, ConfigError), res.output
    assert f"bad --max-elements {value!r}" in res.exception.message and "2e8" in res.exception.fix
    assert not out.exists()


@pytest.mark.parametrize("option", ["--timeout", "--build-timeout"])
def test_run_refuses_time_limits_that_are_not_finite(tmp_path, option):
    for value in ("nan", "inf"):
        res, _ = _run(tmp_path, "--level", "1", "--ids", "1", "--gpus", "cpu", option, value)
        assert res.exit_code == 2 and option in res.output and "not a finite number" in res.output, res.output
    assert not (tmp_path / "k.db").exists()


def test_a_problem_whose_reference_fails_is_scored_apart_not_held_against_the_candidate(tmp_path):
    """A problem whose reference fails at set-up (here its get_inputs raises), before any candidate code ran, is the
    problem's defect, not the model's: its result carries the problem flag ``reference-failed`` and the problem is
    left out of every score, in the run's summary and in the report alike (newcomer review, helper-69: it counted as
    the candidate's runtime_error)."""
    from kernelbench_harness.reporting.data import build_run_data
    from kernelbench_harness.store import Store

    from .conftest import SHORT_TIMING_ARGS

    root = Path(__file__).resolve().parents[2]
    good = (root / "problems" / "level1" / "1_Scaled_Swish.py").read_text()
    (tmp_path / "p" / "level1").mkdir(parents=True)
    (tmp_path / "p" / "level1" / "1_Scaled_Swish.py").write_text(good)
    (tmp_path / "p" / "level1" / "2_Broken_Inputs.py").write_text(
        good.replace("    x = torch.randn(batch_size, features) * 3.0\n",
                     "    raise RuntimeError('this problem file is broken')\n"))
    code = (root / "problems" / "solutions" / "level1" / "1_Scaled_Swish.triton.py").read_text()
    gens = tmp_path / "g.jsonl"
    gens.write_text("".join(json.dumps({"level": 1, "problem_id": i, "model": "m", "code": code}) + "\n"
                            for i in (1, 2)))
    res, db = _run(tmp_path, "--model", f"replay:{gens}", "--problems", str(tmp_path / "p"), "--level", "1",
                   "--gpus", "cpu", "--run-name", "rf", *SHORT_TIMING_ARGS)
    assert res.exit_code == 0, res.output
    assert "1 problem(s) left out of the scores above" in res.output and "L1/2" in res.output
    row = next(line for line in res.output.splitlines() if "│ L1 " in line or "| L1 " in line)
    assert re.search(r"L1\s+\S\s+1\s+\S\s+100%", row), row  # one problem scored, and it is correct
    st = Store(db)
    try:
        frame = st.results_frame("rf")
        broken = frame[frame["problem_id"] == 2].iloc[0]
        assert broken["outcome"] == "runtime_error" and "reference-failed" in list(broken["problem_flags"])
        ok = frame[frame["problem_id"] == 1].iloc[0]
        assert ok["outcome"] == "correct" and "reference-failed" not in list(ok["problem_flags"] or [])
        data = build_run_data(st, "rf", n_resamples=0)
    finally:
        st.close()
    assert data["degenerate"] == ["L1/2"]
    l1 = next(g for g in data["metrics"] if g["group"] == "L1")
    assert l1["problems"] == 1 and l1["correct_rate"]["value"] == 1.0


@pytest.mark.parametrize("model", ["bundled", "replay", "scripted"])
def test_model_arguments_for_a_model_that_is_not_an_llm_are_refused(tmp_path, model):
    """-M temperature=0.2 with bundled, replay: or scripted: was taken and changed nothing."""
    if model == "replay":
        (tmp_path / "g.jsonl").write_text(json.dumps({"level": 1, "problem_id": 1, "code": "x"}) + "\n")
        model = f"replay:{tmp_path / 'g.jsonl'}"
    elif model == "scripted":
        (tmp_path / "s.json").write_text(json.dumps(["x"]))
        model = f"scripted:{tmp_path / 's.json'}"
    res, _ = _run(tmp_path, "--model", model, "-M", "temperature=0.2", "--level", "1", "--ids", "1", "--gpus", "cpu")
    assert isinstance(res.exception, ConfigError), res.output
    assert "-M temperature" in res.exception.message and "takes no model arguments" in res.exception.message
    assert "drop -M" in res.exception.fix and "openai/<model>" in res.exception.fix
    assert not (tmp_path / "k.db").exists()


def test_a_run_planned_after_its_workers_start_with_nothing_to_evaluate_creates_no_database(tmp_path, monkeypatch):
    """Bundled on Ray plans once the workers say which device they have; a plan with nothing to evaluate (CUDA
    solutions on a CPU worker) stops before the store is opened, so no --db file is left behind."""
    import asyncio

    import kernelbench_harness.runner as runner
    from kernelbench_harness.runner import RunConfig, execute_run

    closed = []

    class _Workers:  # the Ray executor's face, without Ray: CPU workers
        def fingerprint(self):
            return {"device_type": "cpu"}

        async def close(self):
            closed.append(True)

    monkeypatch.setattr(runner, "_make_executor", lambda cfg, cache: _Workers())
    monkeypatch.setattr(runner, "_start_sizing", lambda *a, **k: None)
    cfg = RunConfig(model="bundled", model_options={"variant": "cuda"}, levels=(1,), ids="3", executor="ray",
                    db=f"sqlite:///{tmp_path / 'k.db'}", build_cache=str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match="nothing to evaluate"):
        asyncio.run(execute_run(cfg))
    assert closed and not (tmp_path / "k.db").exists()


def test_misspelt_model_arguments_are_warned_about_and_sent_as_given(tmp_path):
    """`kbench run -m big -M max_tokns=100`, with `tempreature = 0.6` under the alias, sent both to the server
    without a word, and vLLM (which ignores unknown fields) sampled at its defaults."""
    from fakes import FakeOpenAIServer

    from .conftest import kbench

    with FakeOpenAIServer("I am sorry, I cannot write this kernel.", model="qwen") as srv:
        cfg = tmp_path / "custom.toml"
        cfg.write_text(f'[aliases.big]\nspec = "local/qwen"\nbase_url = "{srv.base_url}"\ntempreature = 0.6\n')
        p = kbench("run", "-m", "big", "-M", "max_tokns=100", "-M", "temperature=0.2", "-M", "top_k=20",
                   "--level", "1", "--ids", "1", "--gpus", "cpu", "--db", f"sqlite:///{tmp_path / 'k.db'}",
                   "--display", "plain", "--no-report", cwd=tmp_path, env={"KBENCH_CONFIG": str(cfg)})
        (req,) = srv.generation_requests()
    assert {k: req.body.get(k) for k in ("temperature", "tempreature", "max_tokns", "top_k")} == {
        "temperature": 0.2, "tempreature": 0.6, "max_tokns": 100, "top_k": 20}
    warned = [ln for ln in p.stderr.splitlines() if "unknown model argument" in ln]
    assert len(warned) == 2, p.stderr
    assert "'tempreature' (did you mean 'temperature'?)" in warned[0] + warned[1]
    assert "'max_tokns' (did you mean 'max_tokens'?)" in warned[0] + warned[1]
    assert all("-M 'extra_body={" in ln for ln in warned) and "no_code: 1" in p.stdout
