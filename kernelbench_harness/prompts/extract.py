"""Pull the candidate module out of a model's reply.

Replies come in many shapes: one fenced block (the asked-for shape), several blocks (a CUDA block,
then the Python module), blocks without a language tag, a fence the model never closed (the reply
was cut off), prose around the code, a reply that is only code, or ``<think>`` reasoning before the
answer. :func:`extract_code` handles all of them and returns None when there is no code at all.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["CodeBlock", "defines_model_new", "extract_code", "find_code_blocks", "parses"]

_FENCE_OPEN = re.compile(r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")
_MODELNEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_PY_TAGS = frozenset({"python", "py", "python3", "py3", "pytorch", "torch"})
_CODE_START = re.compile(r"^(import |from \S+ import |class |def |@|#!|\"\"\"|''')")
_MAX_STARTS = 20  # code-looking lines tried as the start of an unfenced module
_MAX_TRAILING_PROSE_LINES = 40  # prose lines dropped from the end of an unfenced module


@dataclass(frozen=True, slots=True)
class CodeBlock:
    """One fenced block of a reply.

    Attributes:
        lang: the fence's language tag, lower-cased ("" when none).
        code: the block's content without the fences.
        closed: False when the reply ended before the closing fence.
    """

    lang: str
    code: str
    closed: bool

    @property
    def is_python(self) -> bool:
        """Tagged as Python, or untagged."""
        return self.lang in _PY_TAGS or self.lang == ""

    @property
    def defines_modelnew(self) -> bool:
        return _MODELNEW.search(self.code) is not None


def find_code_blocks(text: str) -> list[CodeBlock]:
    """Every fenced block of ``text`` in order (CommonMark fences: ``` or ~~~, 3 or more).

    A fence closes on a line holding only the same character repeated at least as often; an
    unclosed fence runs to the end of the text.
    """
    blocks: list[CodeBlock] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group("fence")
        lang = (m.group("info").split() or [""])[0].lower().lstrip("{.").rstrip("}")
        close = re.compile(rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            if close.match(lines[i]):
                closed = True
                i += 1
                break
            body.append(lines[i])
            i += 1
        blocks.append(CodeBlock(lang, "\n".join(body), closed))
    return blocks


def parses(code: str) -> bool:
    """Whether ``code`` parses as Python (``ast.parse``)."""
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def defines_model_new(text: str) -> bool:
    """Whether ``text`` has a line that starts ``class ModelNew`` (the rule replies are read by)."""
    return _MODELNEW.search(text) is not None



def _normalize(code: str) -> str:
    return code.strip("\n").rstrip() + "\n"


def _bare_code(text: str) -> str | None:
    """Code in a reply without fences: the whole text, or its tail from the first code-looking line."""
    stripped = text.strip()
    if not stripped:
        return None
    if not _MODELNEW.search(stripped):
        return None
    if parses(stripped):
        return _normalize(stripped)
    lines = stripped.splitlines()
    starts = [i for i, line in enumerate(lines) if _CODE_START.match(line)][:_MAX_STARTS]
    for start in starts:
        # drop trailing prose, one line at a time, until the rest parses
        for end in range(len(lines), max(start, len(lines) - _MAX_TRAILING_PROSE_LINES), -1):
            candidate = "\n".join(lines[start:end])
            if _MODELNEW.search(candidate) and parses(candidate):
                return _normalize(candidate)
    return None


def _from_blocks(blocks: list[CodeBlock]) -> str | None:
    if not blocks:
        return None
    py_model = [b for b in blocks if b.is_python and b.defines_modelnew]
    if py_model:
        # the last complete one; an unclosed block (cut-off reply) only when nothing else has ModelNew
        closed = [b for b in py_model if b.closed]
        return _normalize((closed or py_model)[-1].code)
    any_model = [b for b in blocks if b.defines_modelnew]  # mis-tagged (```cpp holding Python)
    if any_model:
        return _normalize(any_model[-1].code)
    tagged_py = [b for b in blocks if b.lang in _PY_TAGS and b.code.strip()]
    if tagged_py:
        return _normalize(tagged_py[-1].code)
    untagged = [b for b in blocks if b.lang == "" and b.code.strip() and parses(b.code)]
    if untagged:
        return _normalize(untagged[-1].code)
    return None


def extract_code(text: str | None) -> str | None:
    """The candidate module in a model reply, or None when the reply holds no code.

    Order of preference:

    1. ``<think>...</think>`` reasoning is set aside (used only if the answer itself holds no code).
    2. Among fenced blocks: the last Python (or untagged) block defining ``class ModelNew``,
       preferring closed blocks over an unterminated one; then any block defining ``ModelNew``
       whatever its tag; then the last block tagged Python; then the last untagged block that parses.
    3. No fences: the reply itself when it is Python code defining ``ModelNew`` (prose lines before
       or after the code are dropped).

    Args:
        text: the reply.

    Returns:
        The code, ending in one newline, or None.
    """
    if not text or not text.strip():
        return None
    answer = _THINK.sub("", text)
    for part in (answer, text) if answer != text else (text,):
        blocks = find_code_blocks(part)
        code = _from_blocks(blocks) if blocks else _bare_code(part)
        if code is not None:
            return code
    return None
