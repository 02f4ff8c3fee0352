"""The multi-turn loop for one sample: prompt -> reply -> evaluate -> feedback -> next turn.

The loop does not know how candidates are evaluated (a local process pool, Ray, a fake in tests) or
stored: the caller passes ``evaluate`` and ``record``. Every turn produces one :class:`TurnRecord`,
passed to ``record`` as soon as it exists (so a crash loses at most the turn in flight), and the
sample's score is its best turn (:func:`select_best`).

Turn outcomes that need no evaluation:

- the reply held no code -> ``EvalResult(outcome=no_code)``; the next turn asks for a code block;
- the request failed after the adapter's retries -> ``EvalResult(outcome=generation_error)``; the
  sample stops there (more requests would meet the same failure), its earlier turns still count.

Adapters that are not LLMs (replay, bundled) get exactly one turn and no prompt.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .adapters.base import Generation, GenerationRequest, ModelAdapter, SampleSpec
from .core import Backend, Candidate, EvalResult, Outcome, Problem
from .prompts import build_messages, feedback_message

__all__ = ["SampleOutcome", "TurnRecord", "is_scored", "next_messages", "run_sample", "select_best"]

log = logging.getLogger(__name__)

_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """Everything about one turn of one sample.

    Attributes:
        spec: the sample (problem, model, sample_id).
        turn: refinement step, from 0.
        messages: the chat messages sent for this turn (``()`` for non-LLM adapters).
        generation: the adapter's reply (text, code, tokens, latency, cost, error).
        candidate: what was evaluated, or None when the reply held no code or the request failed.
        result: the evaluation, or a ``no_code`` / ``generation_error`` result made by the loop.
    """

    spec: SampleSpec
    turn: int
    messages: tuple[dict[str, str], ...]
    generation: Generation
    candidate: Candidate | None
    result: EvalResult

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (the problem by key and hash, not its source)."""
        p = self.spec.problem
        return {
            "level": p.level, "problem_id": p.problem_id, "problem_sha256": p.code_sha256,
            "model": self.spec.model, "sample_id": self.spec.sample_id, "turn": self.turn,
            "messages": [dict(m) for m in self.messages],
            "generation": dataclasses.asdict(self.generation),
            "candidate": self.candidate.to_dict() if self.candidate else None,
            "result": self.result.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], problem: Problem) -> TurnRecord:
        """Rebuild a record written by :meth:`to_dict` (for resuming a sample)."""
        gen_fields = {f.name for f in dataclasses.fields(Generation)}
        return cls(
            spec=SampleSpec(problem, d["model"], int(d["sample_id"])),
            turn=int(d["turn"]),
            messages=tuple(dict(m) for m in d.get("messages") or ()),
            generation=Generation(**{k: v for k, v in (d.get("generation") or {}).items() if k in gen_fields}),
            candidate=Candidate.from_dict(d["candidate"]) if d.get("candidate") else None,
            result=EvalResult.from_dict(d["result"]),
        )


@dataclass(frozen=True, slots=True)
class SampleOutcome:
    """All turns of one sample and the one that scores it.

    Attributes:
        spec: the sample.
        turns: every turn record, in order (resumed history first).
        best: the fastest correct turn, or the last turn when none is correct.
    """

    spec: SampleSpec
    turns: tuple[TurnRecord, ...]
    best: TurnRecord

    @property
    def best_turn(self) -> int:
        return self.best.turn

    @property
    def correct(self) -> bool:
        """Whether some turn is scored (correct, or an allowed policy mark)."""
        return is_scored(self.best.result)

    @property
    def result(self) -> EvalResult:
        """The scoring turn's result."""
        return self.best.result


def is_scored(result: EvalResult) -> bool:
    """A turn counts as correct when its result carries a speedup (``EvalResult.has_speedup``)."""
    return result.has_speedup


def _num(x: float | None) -> float:
    return x if x is not None and math.isfinite(x) else -math.inf


def select_best(records: Sequence[TurnRecord]) -> TurnRecord:
    """The fastest correct turn: highest ``speedup_compile``, then ``speedup_eager``, then lowest
    candidate time; ties go to the earlier turn. None correct: the last turn.

    Raises:
        ValueError: for an empty sequence.
    """
    if not records:
        raise ValueError("select_best needs at least one turn record")
    scored = [r for r in records if is_scored(r.result)]
    if not scored:
        return records[-1]

    def key(r: TurnRecord) -> tuple[float, float, float, int]:
        ms = r.result.candidate_ms
        return (_num(r.result.speedup_compile), _num(r.result.speedup_eager),
                -ms if ms is not None else -math.inf, -r.turn)

    return max(scored, key=key)


def _history_text(text: str) -> str:
    """A reply as kept in the conversation: closed ``<think>`` blocks dropped (reasoning models
    expect their earlier thinking to be left out)."""
    stripped = _THINK.sub("", text)
    return stripped if stripped.strip() else text


def next_messages(previous: TurnRecord, *, backend: str, feedback_max_chars: int = 4000) -> list[dict[str, str]]:
    """The conversation for the turn after ``previous``: its messages, its reply, and the feedback."""
    return [*previous.messages,
            {"role": "assistant", "content": _history_text(previous.generation.text)},
            {"role": "user", "content": feedback_message(previous.result, max_chars=feedback_max_chars,
                                                         backend=backend)}]


def _no_code_error(gen: Generation) -> str:
    if not gen.text.strip():
        return "the reply was empty"
    return "the reply held no fenced python code block defining class ModelNew"


async def run_sample(
    adapter: ModelAdapter,
    spec: SampleSpec,
    *,
    turns: int,
    backend: str,
    params: dict[str, Any],
    evaluate: Callable[[Candidate], Awaitable[EvalResult]],
    record: Callable[[TurnRecord], Awaitable[None] | None],
    start_turn: int = 0,
    history: list[TurnRecord] | None = None,
    stop_on_correct: bool = False,
    feedback_max_chars: int = 4000,
) -> SampleOutcome:
    """Run (or resume) one sample for up to ``turns`` turns.

    Args:
        adapter: the model; non-LLM adapters (``is_llm=False``) get one turn and no prompt.
        spec: the sample.
        turns: turns in all, resumed ones included (>= 1).
        backend: what the prompt asks for (``"cuda"`` or ``"triton"``).
        params: model arguments for every request (``-M`` values).
        evaluate: evaluates one candidate; candidate failures come back as outcomes (an exception
            here is a harness bug and propagates).
        record: called with each new turn record before the next turn starts (sync or async).
        start_turn: the first turn to run; the turns before it must be in ``history``.
        history: the sample's earlier turn records, turns ``0 .. start_turn - 1`` (a resumed run).
        stop_on_correct: stop after the first correct turn instead of refining until ``turns``.
        feedback_max_chars: cap on each feedback message.

    Returns:
        Every turn record (history first) and the best turn (:func:`select_best`).

    Raises:
        ValueError: ``turns < 1``, or ``history`` that does not hold exactly turns ``0 .. start_turn - 1``
            of this sample.
    """
    if turns < 1:
        raise ValueError(f"turns must be >= 1, got {turns}")
    records = list(history or [])
    if records and start_turn == 0:
        start_turn = len(records)
    if [r.turn for r in records] != list(range(start_turn)):
        raise ValueError(f"history holds turns {[r.turn for r in records]}, expected 0..{start_turn - 1}")
    total = turns if adapter.is_llm else 1

    def finished() -> bool:
        if not records:
            return False
        last = records[-1].result
        return (last.outcome is Outcome.GENERATION_ERROR
                or (stop_on_correct and any(is_scored(r.result) for r in records)))

    if adapter.is_llm:
        messages = (next_messages(records[-1], backend=backend, feedback_max_chars=feedback_max_chars)
                    if records else build_messages(spec.problem, backend))
    else:
        messages = []
    p = spec.problem
    for t in range(start_turn, total):
        if finished():
            break
        gen = await adapter.generate(GenerationRequest(spec, t, tuple(messages), backend, dict(params)))
        candidate: Candidate | None = None
        if gen.error:
            result = EvalResult(Outcome.GENERATION_ERROR, error=gen.error,
                                extra={"error_kind": gen.error_kind} if gen.error_kind else {})
        elif gen.code is None or not gen.code.strip():
            result = EvalResult(Outcome.NO_CODE, error=_no_code_error(gen))
        else:
            candidate = Candidate(p.level, p.problem_id, gen.code, Backend.detect(gen.code), spec.sample_id, t,
                                  spec.model)
            result = await evaluate(candidate)
        rec = TurnRecord(spec, t, tuple(messages), gen, candidate, result)
        ack = record(rec)
        if inspect.isawaitable(ack):
            await ack
        records.append(rec)
        log.debug("%s %s sample %d turn %d: %s", spec.model, p.key, spec.sample_id, t, result.outcome)
        if adapter.is_llm and t + 1 < total:
            messages = next_messages(rec, backend=backend, feedback_max_chars=feedback_max_chars)
    if not records:
        raise ValueError("no turn ran: start_turn is past turns and there is no history")
    return SampleOutcome(spec, tuple(records), select_best(records))
