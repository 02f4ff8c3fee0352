"""``kbench run --model cuda-agent --turns 3`` against a scripted OpenAI-compatible policy server:
turn 0 fails to compile, turn 1 is wrong, turn 2 is right; all three turns are stored and the
sample scores the third."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from early import Early, in_child
from fakes import FakeOpenAIServer

from .conftest import kbench

GOOD = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(y_ptr + offs, SCALE_EXPR * (x / (1.0 + tl.exp(-x))), mask=m)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _k[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), float(self.scale), BLOCK=1024)
        return y
'''


def _reply(code: str) -> str:
    return f"Here is the kernel.\n\n```python\n{code}\n```\n"


SECRET = "sk-test-should-never-leak-0123456789"


def _three_turns(workdir: Path) -> dict:
    """The run of the test below against its scripted server (in a child interpreter, beside the tests before
    it: tests/early.py)."""
    (workdir / "results").mkdir()
    broken = GOOD.replace("SCALE_EXPR", "scale").replace("def forward(self, x):", "def forward(self, x)")
    wrong = GOOD.replace("SCALE_EXPR", "(scale + 1.0)")
    right = GOOD.replace("SCALE_EXPR", "scale")
    db = workdir / "results" / "kb.db"
    with FakeOpenAIServer([_reply(broken), _reply(wrong), _reply(right)], model="my-policy") as srv:
        p = kbench("-v", "run", "--model", "cuda-agent", "--turns", "3", "--level", "1", "--ids", "1", "--gpus", "cpu",
                   "--backend", "triton", "--run-name", "agent", "--db", str(db), "--display", "plain",
                   "--no-report", cwd=workdir,
                   env={"KBENCH_CUDA_AGENT_BASE_URL": srv.base_url, "OPENAI_API_KEY": SECRET})
        reqs = srv.generation_requests()
    return {"db": db, "stdout": p.stdout, "stderr": p.stderr, "reqs": reqs}


# queued when the session is collected (tests/early.py)
EARLY = {"three_turns": Early(in_child(_three_turns))}


@pytest.fixture
def three_turns() -> dict:
    return EARLY["three_turns"].result()


def test_three_turns_compile_error_wrong_correct(three_turns):
    db, reqs = three_turns["db"], three_turns["reqs"]
    assert len(reqs) == 3
    assert SECRET not in three_turns["stdout"] + three_turns["stderr"]  # INFO logs never show a key
    with sqlite3.connect(db) as c:
        rows = c.execute("select a.turn, r.outcome, a.code is not null from attempts a "
                         "join results r on r.attempt_pk = a.id order by a.turn").fetchall()
    assert rows == [(0, "compile_error", 1), (1, "incorrect", 1), (2, "correct", 1)]
    # the feedback of turn 0 (the compile error) and turn 1 (the wrong values) went back to the model
    assert "SyntaxError" in reqs[1].last_user_text or "compile" in reqs[1].last_user_text.lower()
    assert "error" in reqs[2].last_user_text.lower()
    # the sample scores its best turn: the third
    from kernelbench_harness.metrics import sample_scores
    from kernelbench_harness.store import Store

    st = Store(f"sqlite:///{db}")
    try:
        scores = sample_scores(st.results_frame("agent"))
    finally:
        st.close()
    assert len(scores) == 1
    row = scores.iloc[0]
    assert int(row["best_turn"]) == 2 and int(row["turns"]) == 3 and row["outcome"] == "correct"
