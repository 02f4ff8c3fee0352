"""``replay:PATH``: stored generations, bad lines, planning, and the shared kernelsseum file."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kernelbench_harness.adapters import GenerationRequest, SampleSpec, get_adapter
from kernelbench_harness.adapters.replay import ReplayAdapter
from kernelbench_harness.config import KbenchConfig
from kernelbench_harness.core import Problem
from kernelbench_harness.problems import load_problems

SHARED = Path(os.environ.get("KBENCH_SHARED", Path(__file__).resolve().parents[2].parent / "shared"))
KERNELSSEUM = SHARED / "kernelsseum-v0"


def _problem(level: int, pid: int) -> Problem:
    return Problem(level, pid, f"P{pid}", f"# problem {level}/{pid}\nclass Model: pass\n")


def _gen(adapter: ReplayAdapter, spec: SampleSpec):
    return asyncio.run(adapter.generate(GenerationRequest(spec, 0, ())))


def test_lines_samples_models_and_bad_lines(tmp_path, caplog):
    path = tmp_path / "my-gens.jsonl"
    lines = [
        {"level": 1, "problem_id": 1, "code": "A0"},                       # 1: model = stem, sample 0
        {"level": 1, "problem_id": 1, "code": "A1"},                       # 2: sample 1
        "this is not json",                                                # 3: bad
        {"level": 1, "problem_id": 2, "model": "gpt-x", "code": "B"},      # 4
        {"level": 1, "code": "no id"},                                     # 5: missing problem_id
        {"level": 1, "problem_id": 1, "model": "gpt-x", "sample_id": 7, "code": "C7", "reported": {"ok": 1}},
        {"level": "one", "problem_id": 1, "code": "bad level"},            # 7: bad
        {"level": 1, "problem_id": 1, "model": "gpt-x", "sample_id": 7, "code": "dup"},  # 8: duplicate
        {"level": 2, "problem_id": 3, "code": "Here:\n```python\nclass ModelNew: pass\n```\n"},  # 9: fenced
        {"level": 1, "problem_id": 2, "code": 5},                          # 10: code not a string
    ]
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n\n")
    caplog.set_level(logging.WARNING)
    a = get_adapter(f"replay:{path}", config=KbenchConfig())
    assert isinstance(a, ReplayAdapter) and a.is_llm is False
    got = [(g.line_no, g.level, g.problem_id, g.model, g.sample_id, g.code) for g in a.generations]
    assert got == [
        (1, 1, 1, "my-gens", 0, "A0"),
        (2, 1, 1, "my-gens", 1, "A1"),
        (4, 1, 2, "gpt-x", 0, "B"),
        (6, 1, 1, "gpt-x", 7, "C7"),
        (9, 2, 3, "my-gens", 0, "class ModelNew: pass\n"),
    ]
    warned = {int(r.getMessage().split(":")[1]) for r in caplog.records if "line skipped" in r.getMessage()}
    assert warned == {3, 5, 7, 8, 10}
    assert any("missing problem_id" in r.getMessage() for r in caplog.records)

    plan = a.plan([_problem(1, 1), _problem(1, 2)], samples=1)  # level 2 not selected
    assert [(s.problem.problem_id, s.model, s.sample_id) for s in plan] == [
        (1, "my-gens", 0), (1, "my-gens", 1), (2, "gpt-x", 0), (1, "gpt-x", 7)]
    assert plan[0].problem.name == "P1"  # specs carry the selected Problem objects

    g = _gen(a, plan[3])
    assert g.code == "C7" and g.text == "C7" and g.model == "gpt-x" and g.error == ""
    assert a.stored(plan[3]).fields["reported"] == {"ok": 1}
    missing = _gen(a, SampleSpec(_problem(1, 1), "gpt-x", 99))
    assert missing.code is None and "holds no generation" in missing.error


def test_model_option_and_missing_file(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text('{"level": 1, "problem_id": 1, "code": "x"}\n')
    a = get_adapter(f"replay:{path}", options={"model": "legacy-model"}, config=KbenchConfig())
    assert a.generations[0].model == "legacy-model"


@pytest.mark.skipif(not (KERNELSSEUM / "generations.jsonl").is_file(), reason="shared kernelsseum-v0 absent")
def test_plan_on_shared_kernelsseum_generations():
    path = KERNELSSEUM / "generations.jsonl"
    a = get_adapter(f"replay:{path}", config=KbenchConfig())
    raw = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(a.generations) == len(raw)  # every line usable
    problems = load_problems(KERNELSSEUM / "problems", levels=[1]).problems
    plan = a.plan(problems, samples=1)
    expected = [r for r in raw if r["level"] == 1]
    assert len(plan) == len(expected) == 99
    assert Counter(s.model for s in plan) == Counter(r["model"] for r in expected)
    assert len({(s.problem.problem_id, s.model, s.sample_id) for s in plan}) == len(plan)
    assert all(s.problem.level == 1 for s in plan)
    first = plan[0]
    g = _gen(a, first)
    line = next(r for r in expected if r["problem_id"] == first.problem.problem_id and r["model"] == first.model)
    assert g.code == line["code"] and "ModelNew" in g.code
    assert a.stored(first).fields["reported"] == line["reported"]


def test_a_negative_sample_id_or_a_model_that_is_not_a_name_skips_the_line(tmp_path, caplog):
    """sample_id -1 was stored as sample -1 (the module says sample ids are non-negative), and a model given as a
    list or an object was silently replaced by the file's stem, so its sample counted for another model."""
    path = tmp_path / "g.jsonl"
    lines = [{"level": 1, "problem_id": 1, "code": "A", "sample_id": -1},
             {"level": 1, "problem_id": 1, "code": "B", "model": ["gpt-x"]},
             {"level": 1, "problem_id": 1, "code": "C", "model": True},
             {"level": 1, "problem_id": 1, "code": "D", "model": 7},
             {"level": 1, "problem_id": 1, "code": "E", "model": None}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    caplog.set_level(logging.WARNING)
    a = ReplayAdapter(path)
    assert [(g.line_no, g.model, g.sample_id) for g in a.generations] == [(4, "7", 0), (5, "g", 1)]
    warned = {int(r.getMessage().split(":")[1]) for r in caplog.records if "line skipped" in r.getMessage()}
    assert warned == {1, 2, 3}


def test_the_cli_prints_each_warning_about_the_file_once(tmp_path):
    """`kbench run --model replay:FILE` printed each skipped line's warning twice: the CLI built an adapter to
    check --model and the run built a second one, and each read the file. Counted in what the CLI prints; the run
    ends at planning (no line answers a problem the source holds), which comes after the run has its adapter."""
    gens = tmp_path / "gens.jsonl"
    gens.write_text("\n".join(["not json",                                                 # 1: bad
                               json.dumps({"level": 1, "problem_id": 99, "code": "y"}),   # 2: not in the source
                               json.dumps({"level": 1})]) + "\n")                         # 3: bad
    p = subprocess.run([sys.executable, "-m", "kernelbench_harness", "run", "--model", f"replay:{gens}",
                        "--gpus", "cpu", "--db", f"sqlite:///{tmp_path / 'k.db'}", "--display", "plain",
                        "--no-report", "--level", "1", "--ids", "1,99"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "nothing to evaluate" in out, out[-3000:]
    assert out.count("gens.jsonl:1: not JSON") == 1, out
    assert out.count("gens.jsonl:3: missing problem_id, code; line skipped") == 1, out
    assert out.count("L1/99 (line 2)") == 1, out


REFUSAL = "I'm sorry, I cannot write a kernel for this problem. It is already optimal."
BROKEN = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x)\n        return x\n"


@pytest.mark.parametrize("stored,code", [
    (REFUSAL, None),                                                  # prose: no code, as from the model
    ("Sorry, no kernel:\n```\nnot code, just words\n```\n", None),    # a fenced reply whose block is no code
    ("   \n", None),
    (BROKEN, BROKEN),                                                 # a module with a syntax error: as stored
    ("Here:\n```python\nclass ModelNew: pass\n```\n", "class ModelNew: pass\n"),
    ('DOC = """\n```python\nx = 1\n```\n"""\nclass ModelNew: pass\n',  # a module whose string holds fences
     'DOC = """\n```python\nx = 1\n```\n"""\nclass ModelNew: pass\n'),
    ("ModelNew = dict\n", "ModelNew = dict\n"),                       # Python: the evaluator judges it
])
def test_stored_text_is_read_as_a_reply_would_be(tmp_path, stored, code):
    """A replayed refusal in prose was served as code and judged compile_error ('unterminated string literal'),
    where the same reply from scripted: or a model API is no_code."""
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"level": 1, "problem_id": 1, "code": stored}) + "\n")
    a = ReplayAdapter(path)
    (spec,) = a.plan([_problem(1, 1)])
    g = _gen(a, spec)
    assert g.code == code and g.text == stored and g.error == ""


def test_a_replayed_refusal_is_no_code_and_a_broken_module_a_compile_error(tmp_path):
    """The verdicts `kbench run -m replay:` stores, beside those of the same replies through scripted:."""
    gens = tmp_path / "gens.jsonl"
    gens.write_text(json.dumps({"level": 1, "problem_id": 1, "code": REFUSAL}) + "\n"
                    + json.dumps({"level": 1, "problem_id": 2, "code": BROKEN}) + "\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"L1/1": [REFUSAL], "*": [f"```python\n{BROKEN}```\n"]}))
    db = tmp_path / "k.db"
    for run, model in (("replayed", f"replay:{gens}"), ("scripted", f"scripted:{script}")):
        p = subprocess.run([sys.executable, "-m", "kernelbench_harness", "run", "--model", model, "--run-name", run,
                            "--gpus", "cpu", "--db", f"sqlite:///{db}", "--display", "plain", "--no-report",
                            "--level", "1", "--ids", "1,2"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    from kernelbench_harness.store import Store

    st = Store(f"sqlite:///{db}")
    try:
        got = {(run, int(r.problem_id)): (r.outcome, r.error) for run in ("replayed", "scripted")
               for r in st.results_frame(run).itertuples()}
    finally:
        st.close()
    for run in ("replayed", "scripted"):
        assert got[(run, 1)][0] == "no_code", got
        assert got[(run, 2)][0] == "compile_error" and "SyntaxError" in got[(run, 2)][1], got
