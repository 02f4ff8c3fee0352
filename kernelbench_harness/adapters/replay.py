"""``replay:PATH``: serve stored generations from a JSONL file instead of asking a model.

Each line is a JSON object with at least ``level``, ``problem_id`` and ``code`` (the format of
KernelBench-style generation dumps such as kernelsseum's ``generations.jsonl``); optional ``model``
(default: the file's stem, or the ``model`` option) and ``sample_id`` (default: the line's index among
the lines of the same level, problem_id and model, from 0). Other fields are kept and available
through :meth:`ReplayAdapter.stored` (e.g. what the original harness reported).

``code`` is usually a module, served as stored (syntax errors and all: they are the candidate's). A stored
reply is read by the rule every model reply is read by (:func:`~kernelbench_harness.prompts.extract_code`):
a fenced reply gives its code block, and text that is not Python and defines no ``class ModelNew`` (a model's
refusal in prose) holds no code, so the sample's outcome is ``no_code``, as it would be from the model itself.

Bad lines (not JSON, a missing or mistyped field, a duplicate sample) are logged with their line
number and skipped. The adapter is not an LLM: the agent loop runs one turn and sends no prompt.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import Problem
from ..errors import ConfigError
from ..prompts import defines_model_new, extract_code, find_code_blocks, parses
from .base import Generation, GenerationRequest, ModelAdapter, SampleSpec, refuse_unknown_options

__all__ = ["ReplayAdapter", "StoredGeneration", "read_generations", "stored_code"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoredGeneration:
    """One usable line of a replay file.

    Attributes:
        line_no: 1-based line number in the file.
        level, problem_id: the problem it answers.
        model: the model that wrote it.
        sample_id: as given by the line, else its index among lines of the same problem and model.
        code: the candidate (:func:`stored_code` of the line's ``code``), None when the line holds none.
        fields: the whole JSON object of the line.
    """

    line_no: int
    level: int
    problem_id: int
    model: str
    sample_id: int
    code: str | None
    fields: Mapping[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The line's ``code`` field as stored."""
        return str(self.fields.get("code", self.code or ""))


def stored_code(text: str) -> str | None:
    """The candidate in a replay line's ``code`` field, or None when it holds no code.

    A module (text that parses as Python, or defines ``class ModelNew``) is the candidate as stored, a
    syntax error included (the evaluator's verdict is then ``compile_error``). Any other text is a stored
    reply and is read as a model's reply (:func:`~kernelbench_harness.prompts.extract_code`): a fenced
    reply gives its code block; prose (a refusal) gives None. Text without fences is never trimmed, so a
    module is never cut down to a part that parses.

    Args:
        text: the stored ``code`` field.
    """
    if not text.strip():
        return None
    if parses(text):
        return text
    if find_code_blocks(text):
        return extract_code(text)
    return text if defines_model_new(text) else None


def _as_id(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return None


def read_generations(path: str | Path, *, default_model: str | None = None) -> list[StoredGeneration]:
    """Parse a replay file; bad lines are logged (WARNING, with their line number) and skipped.

    Args:
        path: the JSONL file.
        default_model: model name for lines without ``model``; default the file's stem.

    Raises:
        ConfigError: when the file does not exist or cannot be read.
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"replay file {p} does not exist", fix="give --model replay:PATH an existing .jsonl") \
            from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"replay file {p} cannot be read: {e}") from None
    model_default = default_model or p.stem
    out: list[StoredGeneration] = []
    counts: dict[tuple[int, int, str], int] = {}
    seen: set[tuple[int, int, str, int]] = set()
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:
            log.warning("%s:%d: not JSON (%s); line skipped", p, n, e)
            continue
        if not isinstance(obj, dict):
            log.warning("%s:%d: not a JSON object; line skipped", p, n)
            continue
        missing = [k for k in ("level", "problem_id", "code") if k not in obj]
        if missing:
            log.warning("%s:%d: missing %s; line skipped", p, n, ", ".join(missing))
            continue
        level, pid = _as_id(obj["level"]), _as_id(obj["problem_id"])
        if level is None or pid is None or level < 1 or pid < 1:
            log.warning("%s:%d: level and problem_id must be positive integers; line skipped", p, n)
            continue
        if not isinstance(obj["code"], str):
            log.warning("%s:%d: code is not a string; line skipped", p, n)
            continue
        model = obj.get("model")
        if (model is not None and not isinstance(model, (str, int))) or isinstance(model, bool):
            log.warning("%s:%d: model is not a string; line skipped", p, n)
            continue
        model = str(model) if model is not None and str(model) else model_default
        key = (level, pid, model)
        index = counts.get(key, 0)
        counts[key] = index + 1
        if "sample_id" in obj and obj["sample_id"] is not None:
            sid = _as_id(obj["sample_id"])
            if sid is None or sid < 0:
                log.warning("%s:%d: sample_id must be a non-negative integer; line skipped", p, n)
                continue
        else:
            sid = index
        if (*key, sid) in seen:
            log.warning("%s:%d: duplicate sample (level %d, problem %d, model %s, sample %d); line skipped",
                        p, n, level, pid, model, sid)
            continue
        seen.add((*key, sid))
        out.append(StoredGeneration(n, level, pid, model, sid, stored_code(obj["code"]), obj))
    return out


class ReplayAdapter(ModelAdapter):
    """Serves the generations stored in a JSONL file (see the module docstring).

    Args:
        path: the JSONL file.
        options: ``model`` (name for lines without one; default the file's stem), the only option.

    Raises:
        ConfigError: an unknown option; the file does not exist or cannot be read.
    """

    is_llm = False
    takes_model_args = False
    max_concurrency = 64

    def __init__(self, path: str | Path, *, options: Mapping[str, Any] | None = None) -> None:
        opts = dict(options or {})
        refuse_unknown_options("replay", opts, {"model": "-O model=<name> (the model of lines without one)"})
        self.path = Path(path)
        self.name = f"replay:{path}"
        self.generations = read_generations(self.path, default_model=opts.get("model"))
        self._index = {(g.level, g.problem_id, g.model, g.sample_id): g for g in self.generations}
        log.info("%s: %d generations read", self.name, len(self.generations))

    def plan(self, problems: Sequence[Problem], samples: int = 1) -> list[SampleSpec]:
        """One sample per stored generation of a selected problem, in file order.

        ``samples`` is ignored: the file decides how many samples each problem has.
        """
        by_key = {(p.level, p.problem_id): p for p in problems}
        specs = [SampleSpec(by_key[(g.level, g.problem_id)], g.model, g.sample_id)
                 for g in self.generations if (g.level, g.problem_id) in by_key]
        skipped = len(self.generations) - len(specs)
        if skipped:
            log.info("%s: %d stored generations are for problems not selected", self.name, skipped)
        return specs

    def stored(self, spec: SampleSpec) -> StoredGeneration | None:
        """The stored line for ``spec`` (its ``fields`` hold e.g. the originally reported verdict)."""
        return self._index.get((spec.problem.level, spec.problem.problem_id, spec.model, spec.sample_id))

    async def generate(self, request: GenerationRequest) -> Generation:
        g = self.stored(request.spec)
        if g is None:
            s = request.spec
            return Generation(text="", code=None, model=s.model, attempts=0, error_kind="fatal",
                              error=f"{self.name} holds no generation for L{s.problem.level}/"
                                    f"{s.problem.problem_id} model {s.model} sample {s.sample_id}")
        return Generation(text=g.text, code=g.code, model=g.model, attempts=0)
