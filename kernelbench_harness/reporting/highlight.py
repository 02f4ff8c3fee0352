"""Syntax highlighting of candidate and problem sources for the report pages.

Uses Pygments when it is installed (CSS classes; the style sheet is inlined once per page by
:func:`highlight_css`), else escapes the text only.
"""

from __future__ import annotations

from html import escape

__all__ = ["HAVE_PYGMENTS", "highlight_css", "highlight_source"]

try:
    from pygments import highlight as _highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    HAVE_PYGMENTS = True
except ImportError:  # pragma: no cover - pygments ships with rich, so it is nearly always there
    HAVE_PYGMENTS = False

_CSS_CLASS = "hl"


def highlight_source(source: str | None, *, linenos: bool = True) -> str:
    """HTML for ``source`` (Python with embedded CUDA/C++ strings), highlighted when Pygments exists.

    Returns:
        A ``<div class="hl">`` holding a ``<pre>``; empty sources give an empty ``<pre>``.
    """
    source = source or ""
    if HAVE_PYGMENTS:
        fmt = HtmlFormatter(cssclass=_CSS_CLASS, linenos="inline" if linenos else False, wrapcode=True)
        return _highlight(source, PythonLexer(), fmt)
    return f'<div class="{_CSS_CLASS}"><pre><code>{escape(source)}</code></pre></div>'


def highlight_css() -> str:
    """The CSS rules :func:`highlight_source`'s output needs ("" without Pygments)."""
    if not HAVE_PYGMENTS:
        return ""
    return HtmlFormatter(style="default").get_style_defs(f".{_CSS_CLASS}")
