"""The model adapter interface: how kbench asks any model (or a file of stored replies) for kernels.

An adapter turns a :class:`GenerationRequest` (problem, sample, turn, chat messages so far) into a
:class:`Generation` (reply text, extracted code, tokens, latency). Adapters never raise for a
provider failure that retries did not cure: they return a ``Generation`` with ``error`` set, which
becomes the sample's ``generation_error`` outcome. They raise :class:`PrerequisiteError` from
:meth:`ModelAdapter.check_ready` when a key, extra package or server is missing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import Problem
from ..errors import ConfigError

__all__ = ["SampleSpec", "GenerationRequest", "Generation", "ModelAdapter", "refuse_unknown_options"]


@dataclass(frozen=True, slots=True)
class SampleSpec:
    """One independent attempt at one problem by one model.

    Attributes:
        problem: the problem.
        model: the model name stored with results (``openai/gpt-5``, ``cuda-agent``, or for replay the
            ``model`` field of the stored line).
        sample_id: index of the attempt (what pass@k counts), as given by the source.
    """

    problem: Problem
    model: str
    sample_id: int


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """What the agent loop asks of an adapter for one turn.

    Attributes:
        spec: which problem / model / sample.
        turn: refinement step, from 0.
        messages: the conversation so far as chat messages ``{"role": "system"|"user"|"assistant",
            "content": str}``; the last one is the user message to answer.
        backend: what the prompt asked for (``"cuda"`` or ``"triton"``).
        params: model arguments (``-M key=value``: temperature, max_tokens, reasoning_effort...).
    """

    spec: SampleSpec
    turn: int
    messages: tuple[dict[str, str], ...]
    backend: str = "cuda"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Generation:
    """A model's reply for one turn.

    Attributes:
        text: the full reply ("" on error).
        code: the candidate source extracted from the reply, or None when it holds no code.
        model: the model name the provider reported (or the adapter's).
        input_tokens, output_tokens, cached_tokens, reasoning_tokens: as reported, None if not.
        latency_s: wall time of the request(s), seconds, retries included.
        cost_usd: from the price table, None when unknown.
        error: non-empty when the request failed after retries; the sample's outcome is then
            ``generation_error``.
        error_kind: ``rate_limit`` | ``overloaded`` | ``transient`` | ``fatal`` | "".
        attempts: number of HTTP requests made (1 + retries).
    """

    text: str
    code: str | None
    model: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    latency_s: float = 0.0
    cost_usd: float | None = None
    error: str = ""
    error_kind: str = ""
    attempts: int = 1


class ModelAdapter(ABC):
    """Base class of every model adapter.

    Attributes:
        name: the resolved spec, e.g. ``"openai/gpt-5"``, ``"cuda-agent"``, ``"replay:gens.jsonl"``.
        is_llm: False for adapters that serve stored code (replay, bundled): the agent loop then
            runs one turn and sends no prompts.
        max_concurrency: cap on requests in flight for this adapter's provider.
        takes_model_args: False for adapters whose replies do not depend on model arguments (replay,
            scripted, bundled): ``kbench run`` refuses ``-M`` for them.
    """

    name: str = ""
    is_llm: bool = True
    max_concurrency: int = 8
    takes_model_args: bool = True

    def plan(self, problems: Sequence[Problem], samples: int) -> list[SampleSpec]:
        """The samples to evaluate: by default every problem x ``range(samples)`` under ``self.name``.

        Replay-like adapters override this to return what their file holds.
        """
        return [SampleSpec(p, self.name, s) for p in problems for s in range(samples)]

    def check_ready(self) -> None:
        """Raise :class:`~kernelbench_harness.errors.PrerequisiteError` if this adapter cannot work now
        (missing key, extra package or unreachable server). Called once before a run starts."""

    @abstractmethod
    async def generate(self, request: GenerationRequest) -> Generation:
        """Answer one turn. Never raises for provider failures: returns ``Generation(error=...)``."""

    async def aclose(self) -> None:
        """Release connections."""


def refuse_unknown_options(adapter: str, options: Mapping[str, Any], takes: Mapping[str, str]) -> None:
    """Refuse adapter options (``-O key=value``) that ``adapter`` does not take.

    Args:
        adapter: the adapter's name in the message (``"bundled"``, ``"replay"``).
        options: the options given.
        takes: each option the adapter takes -> how to give it (``"-O model=<name>"``).

    Raises:
        ConfigError: an option not in ``takes``; the message names the options it takes.
    """
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise ConfigError(f"the {adapter} adapter has no option(s) {', '.join(unknown)}; it takes: "
                          f"{', '.join(sorted(takes)) or 'none'}",
                          fix=f"drop them{', or use ' + ' or '.join(takes.values()) if takes else ''}")
