"""Prompts sent to models, and code extraction from their replies.

Templates are jinja2 files under ``prompts/templates/``, one per backend and mode:

- ``{backend}_oneshot.j2``: the KernelBench-style one-shot prompt (the problem's source, one worked
  example written for kbench, and the instruction to return ``ModelNew`` with the same constructor
  signature in ONE fenced python code block), sent with ``system.j2`` as the system message;
- ``{backend}_feedback.j2``: the multi-turn feedback after a turn was evaluated (compile errors
  trimmed; which trial mismatched and by how much; or times and speedups), asking to improve.

The worked example (``example_problem.py.j2``, ``example_{backend}.py.j2``) is read as plain text,
not rendered. Backends with templates: :data:`BACKENDS`.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import jinja2

from ..core import EvalResult, Outcome, Problem, Severity
from ..errors import ConfigError
from .extract import CodeBlock, defines_model_new, extract_code, find_code_blocks, parses

__all__ = [
    "BACKENDS",
    "CodeBlock",
    "build_messages",
    "defines_model_new",
    "extract_code",
    "feedback_message",
    "find_code_blocks",
    "parses",
    "trim_middle",
]

BACKENDS: tuple[str, ...] = ("cuda", "triton")

_BACKEND_LABEL = {"cuda": "CUDA C++", "triton": "Triton"}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@functools.cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("kernelbench_harness.prompts", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def _raw(name: str) -> str:
    env = _env()
    assert env.loader is not None
    return env.loader.get_source(env, name)[0].strip("\n")


def _check_backend(backend: str) -> str:
    b = str(backend).lower()
    if b not in BACKENDS:
        raise ConfigError(f"no prompt templates for backend {backend!r}",
                          fix=f"use one of: {', '.join(BACKENDS)}")
    return b


def build_messages(problem: Problem, backend: str = "cuda") -> list[dict[str, str]]:
    """The one-shot conversation for ``problem``: a system message and the user prompt.

    Args:
        problem: the problem; its full source is shown to the model.
        backend: ``"cuda"`` (CUDA C++ through ``load_inline``) or ``"triton"``.

    Returns:
        ``[{"role": "system", "content": ...}, {"role": "user", "content": ...}]``.

    Raises:
        ConfigError: for a backend without templates.
    """
    b = _check_backend(backend)
    env = _env()
    label = _BACKEND_LABEL[b]
    system = env.get_template("system.j2").render(backend_label=label).strip()
    user = env.get_template(f"{b}_oneshot.j2").render(
        backend_label=label,
        example_problem=_raw("example_problem.py.j2"),
        example_solution=_raw(f"example_{b}.py.j2"),
        problem_code=problem.code.strip("\n"),
    ).strip()
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def trim_middle(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters by dropping its middle.

    Compiler output has the first error near the top and Python tracebacks the cause at the bottom,
    so both ends are kept (about 60% head, 40% tail) around a line saying how much was cut.
    """
    if len(text) <= max_chars:
        return text
    if max_chars < 80:
        return text[:max_chars]
    marker = "\n[... {} characters cut ...]\n"
    room = max_chars - len(marker.format(len(text)))
    head, tail = int(room * 0.6), room - int(room * 0.6)
    return text[:head] + marker.format(len(text) - head - tail) + text[len(text) - tail:]


def _fmt_ms(ms: float) -> str:
    return f"{ms:.4g} ms"


def _fmt_err(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.3g}"


def _trial_info(result: EvalResult) -> tuple[Any, int | None]:
    """(failing trial, number of trials) as the evaluator recorded them, else (None, None).

    Read from ``extra["trials"]`` (a list of per-trial dicts with ``ok``: the first failing one,
    counted from 1) or a count, ``extra["failed_trial"]``, or a finding's ``data["trial"]``.
    """
    trials = result.extra.get("trials")
    n: int | None = None
    failed: Any = None
    if isinstance(trials, list):
        n = len(trials)
        failed = next((i + 1 for i, t in enumerate(trials) if isinstance(t, dict) and not t.get("ok", True)),
                      None)
    elif isinstance(trials, int):
        n = trials
    for key in ("failed_trial", "trial"):
        if failed is None and result.extra.get(key) is not None:
            failed = result.extra[key]
    for f in result.findings:
        for key in ("failed_trial", "trial"):
            if failed is None and f.data.get(key) is not None:
                failed = f.data[key]
    return failed, n


def _mismatch_lines(result: EvalResult) -> list[str]:
    lines = []
    trial, n = _trial_info(result)
    if trial is not None:
        lines.append(f"first mismatch in correctness trial {trial}" + (f" of {n}" if n else "")
                     + " (fresh random inputs each trial)")
    if result.max_abs_err is not None:
        lines.append(f"max absolute error: {_fmt_err(result.max_abs_err)}")
    if result.max_rel_err is not None:
        lines.append(f"max relative error: {_fmt_err(result.max_rel_err)}")
    for key in ("atol", "rtol"):
        if isinstance(result.extra.get(key), (int, float)):
            lines.append(f"tolerance {key}: {result.extra[key]:g}")
    return lines


def _finding_lines(result: EvalResult, limit: int = 8) -> list[str]:
    out = [f"{f.check}: {f.message}" if f.message else f.check
           for f in result.findings if f.severity is not Severity.INFO]
    return out[:limit]


def _timing_lines(result: EvalResult) -> list[str]:
    lines = []
    if result.candidate_ms is not None:
        lines.append(f"your time: {_fmt_ms(result.candidate_ms)}")
    if result.eager_ms is not None:
        s = result.speedup_eager
        lines.append(f"PyTorch eager: {_fmt_ms(result.eager_ms)}"
                     + (f" (speedup {s:.3g}x)" if s is not None else ""))
    if result.compile_ms is not None:
        s = result.speedup_compile
        lines.append(f"torch.compile: {_fmt_ms(result.compile_ms)}"
                     + (f" (speedup {s:.3g}x)" if s is not None else ""))
    return lines


def feedback_message(result: EvalResult, *, max_chars: int = 4000, backend: str = "cuda") -> str:
    """The user message that tells a model how its last candidate fared and asks it to improve.

    Args:
        result: the evaluation of the last turn's candidate (``no_code`` and ``generation_error``
            results are accepted too).
        max_chars: upper bound on the message length; error text is trimmed in the middle to fit.
        backend: the backend the conversation asked for (picks the template's optimisation hints).

    Returns:
        The message text. For compile and runtime errors it quotes the (trimmed) error; for wrong
        outputs it names the failing trial (when the evaluator recorded per-trial results in
        ``extra["trials"]``, or ``extra["failed_trial"]``) and the max abs/rel errors;
        for correct candidates it gives the candidate, eager and torch.compile times and speedups.

    Raises:
        ConfigError: for a backend without templates.
    """
    b = _check_backend(backend)
    template = _env().get_template(f"{b}_feedback.j2")
    error = _ANSI.sub("", result.error or "").strip()
    if not error and result.outcome in (Outcome.COMPILE_ERROR, Outcome.RUNTIME_ERROR):
        error = _ANSI.sub("", result.log or "").strip()
    if result.outcome is Outcome.INCORRECT and error:
        mismatch_extra = [error]
    else:
        mismatch_extra = []
    ctx: dict[str, Any] = {
        "outcome": str(result.outcome),
        "tag": result.tag,
        "mismatch": _mismatch_lines(result),
        "findings": _finding_lines(result),
        "timings": _timing_lines(result),
    }

    def render(err_budget: int) -> str:
        err = trim_middle(error, err_budget)
        mism = ctx["mismatch"] + [trim_middle(e, err_budget) for e in mismatch_extra]
        if not mism and result.outcome is Outcome.INCORRECT:
            mism = ["no details were recorded"]
        text = template.render(**{**ctx, "mismatch": mism}, error=err,
                               error_trimmed=len(err) < len(error))
        return re.sub(r"\n{3,}", "\n\n", text).strip()

    text = render(max_chars)
    if len(text) > max_chars:
        overflow = len(text) - max_chars
        text = render(max(0, len(error) - overflow - 64))  # 64: room for the cut marker
    return text if len(text) <= max_chars else trim_middle(text, max_chars)
