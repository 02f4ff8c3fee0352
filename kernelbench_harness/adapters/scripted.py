"""``scripted:PATH``: a pretend LLM that answers from a script, for tests and dry runs of the agent loop.

The script (a JSON file, or the Python value given to :class:`ScriptedAdapter`) is either

- a list of replies: turn ``t`` of every sample gets item ``t`` (the last one repeats), or
- an object mapping problem keys (``"L1/3"``) to such lists, with ``"*"`` as the default.

A reply is a string (the model's text) or an object ``{"error": "...", "error_kind": "rate_limit"}``
that stands for a request that failed after retries. Every request is kept in
:attr:`ScriptedAdapter.requests` so a test can check what the loop sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..prompts import extract_code
from .base import Generation, GenerationRequest, ModelAdapter, refuse_unknown_options

__all__ = ["ScriptedAdapter"]

Reply = str | Mapping[str, Any]


class ScriptedAdapter(ModelAdapter):
    """Answers turn ``t`` with the script's ``t``-th reply (see the module docstring).

    Args:
        script: a list of replies, or problem key -> list of replies (``"*"``: default).
        name: the model name stored with results.

    Raises:
        ConfigError: for a script of the wrong shape.
    """

    is_llm = True
    takes_model_args = False  # its replies are the script's, whatever the model arguments
    max_concurrency = 64

    def __init__(self, script: Sequence[Reply] | Mapping[str, Sequence[Reply]], *, name: str = "scripted") -> None:
        if isinstance(script, Mapping):
            self.script = {str(k): list(v) for k, v in script.items()}
        elif isinstance(script, Sequence) and not isinstance(script, str):
            self.script = {"*": list(script)}
        else:
            raise ConfigError("a reply script is a list of replies or an object of such lists")
        for k, v in self.script.items():
            if not v or not all(isinstance(r, (str, Mapping)) for r in v):
                raise ConfigError(f"script entry {k!r} must be a non-empty list of strings or error objects")
        self.name = name
        self.requests: list[GenerationRequest] = []

    @classmethod
    def from_file(cls, path: str | Path, *, name: str | None = None,
                  options: Mapping[str, Any] | None = None) -> ScriptedAdapter:
        """Load a JSON script file.

        Args:
            path: the JSON script.
            name: the model name stored with results (default ``scripted:<file stem>``).
            options: adapter options (``-O``); ``name`` (as ``name`` above) is the only one.

        Raises:
            ConfigError: an unknown option, missing file, invalid JSON, or a script of the wrong shape.
        """
        opts = dict(options or {})
        refuse_unknown_options("scripted", opts, {"name": "-O name=<model name>"})
        name = name or (str(opts["name"]) if opts.get("name") not in (None, "") else None)
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"script file {p} does not exist") from None
        except ValueError as e:
            raise ConfigError(f"script file {p} is not valid JSON: {e}") from None
        return cls(data, name=name or f"scripted:{p.stem}")

    async def generate(self, request: GenerationRequest) -> Generation:
        self.requests.append(request)
        replies = self.script.get(request.spec.problem.key) or self.script.get("*")
        if not replies:
            return Generation(text="", code=None, model=self.name, error_kind="fatal",
                              error=f"script has no replies for {request.spec.problem.key}")
        reply = replies[min(request.turn, len(replies) - 1)]
        if isinstance(reply, Mapping):
            return Generation(text="", code=None, model=self.name, error=str(reply.get("error", "failed")),
                              error_kind=str(reply.get("error_kind", "fatal")))
        return Generation(text=reply, code=extract_code(reply), model=self.name)
