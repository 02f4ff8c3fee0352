"""The multi-turn agent loop with scripted models (in-process and over real HTTP) and a fake evaluator."""

from __future__ import annotations

import asyncio
import json
import textwrap

import pytest
from fakes import FakeOpenAIServer

from kernelbench_harness.adapters import get_adapter
from kernelbench_harness.adapters.base import SampleSpec
from kernelbench_harness.adapters.replay import ReplayAdapter
from kernelbench_harness.adapters.scripted import ScriptedAdapter
from kernelbench_harness.agent import SampleOutcome, TurnRecord, run_sample, select_best
from kernelbench_harness.config import KbenchConfig
from kernelbench_harness.core import Candidate, EvalResult, Outcome, Problem, TimingStats

PROBLEM = Problem(1, 3, "Scale", "import torch\nclass Model: ...  # PROBLEM-SOURCE\n")
SPEC = SampleSpec(PROBLEM, "scripted", 0)
COMPILE_ERROR = 'kernel.cu(14): error: identifier "threadIdx_x" is undefined'


def module(marker: str) -> str:
    return textwrap.dedent(f"""\
        import torch
        import torch.nn as nn
        # {marker}

        class ModelNew(nn.Module):
            def forward(self, x):
                return x
    """)


def reply(marker: str) -> str:
    return f"Here is my attempt ({marker}).\n```python\n{module(marker)}```\n"


def _timed(ms: float) -> TimingStats:
    return TimingStats(ms, ms, 0.0, ms, ms, ms, ms, 20)


class FakeEvaluator:
    """Judges candidates by a marker in their source; remembers what it saw."""

    def __init__(self) -> None:
        self.seen: list[Candidate] = []

    async def __call__(self, cand: Candidate) -> EvalResult:
        self.seen.append(cand)
        src = cand.source
        if "COMPILE_FAIL" in src:
            return EvalResult(Outcome.COMPILE_ERROR, error=f"{COMPILE_ERROR}\nninja: build stopped")
        if "WRONG" in src:
            return EvalResult(Outcome.INCORRECT, compiled=True, max_abs_err=0.5, max_rel_err=1.25,
                              extra={"failed_trial": 2, "trials": 5})
        ms = 0.4 if "FASTER" in src else 0.8
        return EvalResult(Outcome.CORRECT, compiled=True, correct=True, candidate=_timed(ms), eager_ms=1.0,
                          compile_ms=0.9)


def _run(adapter, *, turns=3, evaluate=None, record=None, **kw) -> tuple[SampleOutcome, list[TurnRecord]]:
    recorded: list[TurnRecord] = []

    async def rec(r: TurnRecord) -> None:
        recorded.append(r)

    async def go():
        return await run_sample(adapter, kw.pop("spec", SPEC), turns=turns, backend="cuda", params={},
                                evaluate=evaluate or FakeEvaluator(), record=record or rec, **kw)

    return asyncio.run(go()), recorded


def test_no_code_then_incorrect_then_correct():
    adapter = ScriptedAdapter(["I will think about it first.", reply("WRONG"), reply("OK")])
    ev = FakeEvaluator()
    out, recorded = _run(adapter, evaluate=ev)
    assert [r.turn for r in out.turns] == [0, 1, 2] and recorded == list(out.turns)
    assert [r.result.outcome for r in out.turns] == [Outcome.NO_CODE, Outcome.INCORRECT, Outcome.CORRECT]
    assert out.turns[0].candidate is None and "no fenced python code block" in out.turns[0].result.error
    assert out.best_turn == 2 and out.correct and out.result.outcome is Outcome.CORRECT
    assert [c.turn for c in ev.seen] == [1, 2]  # no evaluation for a reply without code
    c = ev.seen[1]
    assert (c.level, c.problem_id, c.sample_id, c.model) == (1, 3, 0, "scripted") and "OK" in c.source
    # the conversation the model saw at each turn
    m0, m1, m2 = (r.messages for r in out.turns)
    assert [m["role"] for m in m0] == ["system", "user"] and "PROBLEM-SOURCE" in m0[1]["content"]
    assert m1[:2] == m0 and m1[2] == {"role": "assistant", "content": "I will think about it first."}
    assert "no fenced python code block" in m1[3]["content"]
    assert m2[:4] == m1 and m2[4]["content"] == reply("WRONG")
    assert "max absolute error: 0.5" in m2[5]["content"] and "trial 2 of 5" in m2[5]["content"]
    assert [r.turn for r in adapter.requests] == [0, 1, 2]


def test_cuda_agent_over_http_compile_error_wrong_then_correct(monkeypatch):
    """The loop against a scripted OpenAI-compatible policy server, as ``--model cuda-agent`` runs it."""
    with FakeOpenAIServer([reply("COMPILE_FAIL"), reply("WRONG"), reply("OK")], model="policy") as srv:
        monkeypatch.setenv("KBENCH_CUDA_AGENT_BASE_URL", srv.base_url)
        adapter = get_adapter("cuda-agent", config=KbenchConfig())
        adapter.check_ready()
        records: list[TurnRecord] = []
        spec = SampleSpec(PROBLEM, adapter.name, 0)
        out, _ = _run(adapter, spec=spec, record=records.append)  # a sync record callback
        assert [r.result.outcome for r in records] == [Outcome.COMPILE_ERROR, Outcome.INCORRECT, Outcome.CORRECT]
        assert out.best_turn == 2 and out.best.candidate.model == "cuda-agent"
        reqs = srv.generation_requests()
        assert len(reqs) == 3 and [srv.turn_of(r.body) for r in reqs] == [0, 1, 2]
        assert COMPILE_ERROR in reqs[1].last_user_text  # the compile error went back to the model
        assert "max absolute error: 0.5" in reqs[2].last_user_text
        assert all(r.generation.model == "policy" and r.generation.input_tokens for r in records)


def test_keeps_refining_after_correct_unless_stop_on_correct():
    adapter = ScriptedAdapter([reply("OK"), reply("FASTER"), reply("WRONG")])
    out, _ = _run(adapter)
    assert len(out.turns) == 3 and out.best_turn == 1  # the fastest correct turn
    assert out.best.result.speedup_compile == pytest.approx(0.9 / 0.4)
    out, _ = _run(ScriptedAdapter([reply("OK"), reply("FASTER")]), stop_on_correct=True)
    assert len(out.turns) == 1 and out.best_turn == 0


def test_no_correct_turn_scores_the_last():
    out, _ = _run(ScriptedAdapter([reply("WRONG"), reply("COMPILE_FAIL")]), turns=2)
    assert not out.correct and out.best_turn == 1 and out.result.outcome is Outcome.COMPILE_ERROR


def test_select_best_ties_go_to_earlier_turn():
    out, _ = _run(ScriptedAdapter([reply("WRONG"), reply("OK"), reply("OK")]))
    assert select_best(out.turns).turn == 1
    with pytest.raises(ValueError):
        select_best([])


def test_generation_error_stops_the_sample_and_keeps_earlier_turns():
    adapter = ScriptedAdapter([reply("OK"), {"error": "openai/x: HTTP 429: slow down", "error_kind": "rate_limit"},
                               reply("FASTER")])
    ev = FakeEvaluator()
    out, _ = _run(adapter, evaluate=ev)
    assert [r.result.outcome for r in out.turns] == [Outcome.CORRECT, Outcome.GENERATION_ERROR]
    assert out.turns[1].candidate is None and "429" in out.turns[1].result.error
    assert out.turns[1].result.extra["error_kind"] == "rate_limit"
    assert out.best_turn == 0 and len(ev.seen) == 1


def test_non_llm_adapter_runs_one_turn_without_prompt(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"level": 1, "problem_id": 3, "model": "m", "code": module("OK")}) + "\n")
    adapter = ReplayAdapter(path)
    spec = adapter.plan([PROBLEM], 1)[0]
    out, recorded = _run(adapter, spec=spec, turns=5)
    assert len(out.turns) == 1 and len(recorded) == 1
    assert out.turns[0].messages == () and out.correct
    assert out.turns[0].candidate.model == "m"


def test_resume_continues_the_conversation():
    adapter = ScriptedAdapter([reply("WRONG"), reply("OK"), reply("FASTER")])
    first, _ = _run(adapter, turns=1)
    assert len(first.turns) == 1
    history = [TurnRecord.from_dict(json.loads(json.dumps(r.to_dict())), PROBLEM) for r in first.turns]
    assert history == list(first.turns)  # records survive a JSON round trip
    out, recorded = _run(adapter, turns=3, start_turn=1, history=history)
    assert [r.turn for r in out.turns] == [0, 1, 2] and [r.turn for r in recorded] == [1, 2]
    m1 = out.turns[1].messages
    assert m1[:2] == history[0].messages and m1[2]["content"] == reply("WRONG")
    assert "max absolute error" in m1[3]["content"]
    assert out.best_turn == 2
    with pytest.raises(ValueError, match="history holds turns"):
        _run(adapter, turns=3, start_turn=2, history=history)
    with pytest.raises(ValueError, match="turns must be"):
        _run(adapter, turns=0)


def test_resume_after_a_finished_sample_runs_nothing_new():
    adapter = ScriptedAdapter([reply("OK")])
    first, _ = _run(adapter, turns=1, stop_on_correct=True)
    out, recorded = _run(adapter, turns=3, history=list(first.turns), stop_on_correct=True)
    assert recorded == [] and len(out.turns) == 1 and len(adapter.requests) == 1


def test_reasoning_is_dropped_from_the_history():
    think = "<think>long private reasoning</think>\n" + reply("WRONG")
    out, _ = _run(ScriptedAdapter([think, reply("OK")]), turns=2)
    assistant = out.turns[1].messages[2]
    assert assistant["role"] == "assistant" and "long private reasoning" not in assistant["content"]
    assert assistant["content"] == reply("WRONG")
    assert out.turns[0].generation.text == think  # the record keeps the full reply
