"""Small inline SVG charts (no JavaScript, no external files): step lines, histograms, stacked bars.

Each function returns an ``<svg>`` element as a string, sized by its ``viewBox`` so that it scales to
the width of its container (phones included). Text is escaped; colours come from CSS classes
where the page defines them, with fallbacks inline.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from html import escape

__all__ = ["OUTCOME_COLORS", "PALETTE", "histogram", "log2_bins", "stacked_bars", "step_chart"]

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
)

OUTCOME_COLORS = {
    "correct": "#2ca02c",
    "policy": "#98df8a",
    "timing_invalid": "#ffbb78",
    "incorrect": "#d62728",
    "cheat": "#7b1fa2",
    "compile_error": "#ff7f0e",
    "runtime_error": "#e377c2",
    "timeout": "#8c564b",
    "oom": "#bcbd22",
    "no_code": "#7f7f7f",
    "generation_error": "#c7c7c7",
    "missing": "#e0e0e0",
}


def _fmt(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".") if abs(x - round(x, 1)) < 1e-9 else f"{x:.2f}"


def _svg_open(w: int, h: int, title: str, cls: str = "chart") -> str:
    t = escape(title)
    return (
        f'<svg class="{cls}" viewBox="0 0 {w} {h}" role="img" aria-label="{t}" '
        f'xmlns="http://www.w3.org/2000/svg" preserveAspectRatio="xMidYMid meet"><title>{t}</title>'
    )


def step_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_max: float = 3.0,
    marks: Sequence[float] = (),
    width: int = 560,
    height: int = 300,
) -> str:
    """A right-continuous step chart of y(x) per series (e.g. fast_p as a function of p).

    Args:
        series: name -> breakpoints ``[(x0, y0), (x1, y1), ...]`` sorted by x; y holds from x_i until
            x_{i+1}; the last value holds to ``x_max``. y in [0, 1].
        title: accessible title.
        x_label, y_label: axis labels.
        x_max: right end of the x axis (values beyond are clipped).
        marks: x positions drawn as dashed guides (fast_p's thresholds).
        width, height: viewBox size in px.
    """
    ml, mr, mt, mb = 48, 12, 12, 40
    pw, ph = width - ml - mr, height - mt - mb
    legend_h = 18 * ((len(series) + 2) // 3) + 12
    height += legend_h

    def sx(x: float) -> float:
        return ml + pw * min(max(x, 0.0), x_max) / x_max

    def sy(y: float) -> float:
        return mt + ph * (1 - min(max(y, 0.0), 1.0))

    out = [
        _svg_open(width, height, title),
        f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#999" stroke-width="1"/>',
    ]
    for i in range(0, 11, 2):
        y = i / 10
        out.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#eee"/>')
        out.append(
            f'<text x="{ml - 6}" y="{sy(y) + 4:.1f}" font-size="11" text-anchor="end">{int(y * 100)}%</text>'
        )
    step = 0.5 if x_max <= 4 else 1.0
    x = 0.0
    while x <= x_max + 1e-9:
        out.append(
            f'<text x="{sx(x):.1f}" y="{mt + ph + 16}" font-size="11" text-anchor="middle">{_fmt(x)}</text>'
        )
        x += step
    for m in marks:
        if 0 <= m <= x_max:
            out.append(
                f'<line x1="{sx(m):.1f}" x2="{sx(m):.1f}" y1="{mt}" y2="{mt + ph}" stroke="#bbb" '
                f'stroke-dasharray="3,3"/>'
            )
    out.append(
        f'<text x="{ml + pw / 2:.1f}" y="{mt + ph + 34}" font-size="12" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    out.append(
        f'<text x="12" y="{mt + ph / 2:.1f}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 12 {mt + ph / 2:.1f})">{escape(y_label)}</text>'
    )
    for k, (name, pts) in enumerate(series.items()):
        color = PALETTE[k % len(PALETTE)]
        pts = list(pts) or [(0.0, 0.0)]
        d = [f"M{sx(pts[0][0]):.1f},{sy(pts[0][1]):.1f}"]
        for (_x0, _y0), (x1, y1) in itertools.pairwise(pts):
            if x1 > x_max:
                break
            d.append(f"H{sx(x1):.1f}V{sy(y1):.1f}")
        d.append(f"H{sx(x_max):.1f}")
        out.append(
            f'<path d="{"".join(d)}" fill="none" stroke="{color}" stroke-width="2">'
            f"<title>{escape(name)}</title></path>"
        )
        lx = ml + (k % 3) * (pw / 3)
        ly = mt + ph + 56 + 18 * (k // 3)
        out.append(
            f'<rect x="{lx:.1f}" y="{ly - 9}" width="12" height="4" fill="{color}"/>'
            f'<text x="{lx + 16:.1f}" y="{ly - 4}" font-size="11">{escape(_short(name, 28))}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def log2_bins(lo_exp: int = -4, hi_exp: int = 4) -> list[tuple[float, float, str]]:
    """Bins of speedup on a log2 scale: ``(low, high, label)``, open at both ends."""
    bins = [(0.0, 2.0**lo_exp, f"<{_ratio(2.0**lo_exp)}")]
    for e in range(lo_exp, hi_exp):
        bins.append((2.0**e, 2.0 ** (e + 1), f"{_ratio(2.0**e)}-{_ratio(2.0 ** (e + 1))}"))
    bins.append((2.0**hi_exp, math.inf, f">{_ratio(2.0**hi_exp)}"))
    return bins


def _ratio(x: float) -> str:
    return f"1/{round(1 / x)}x" if x < 1 else f"{int(x) if x == int(x) else x}x"


def histogram(
    values: Sequence[float],
    *,
    title: str,
    x_label: str,
    width: int = 560,
    height: int = 220,
    color: str = PALETTE[0],
) -> str:
    """Histogram of speedups on log2 bins (1/16x .. 16x), the 1x boundary marked.

    Args:
        values: positive speedups.
        title: accessible title.
        x_label: axis label.
    """
    bins = log2_bins()
    counts = [0] * len(bins)
    for v in values:
        if v is None or not v > 0:
            continue
        for i, (lo, hi, _) in enumerate(bins):
            if lo <= v < hi:
                counts[i] += 1
                break
    ml, mr, mt, mb = 36, 8, 12, 52
    pw, ph = width - ml - mr, height - mt - mb
    top = max(counts) if counts and max(counts) > 0 else 1
    bw = pw / len(bins)
    out = [
        _svg_open(width, height, title),
        f'<line x1="{ml}" x2="{ml + pw}" y1="{mt + ph}" y2="{mt + ph}" stroke="#999"/>',
    ]
    for i, (c, (lo, hi, label)) in enumerate(zip(counts, bins)):
        h = ph * c / top
        x = ml + i * bw
        fill = color if lo >= 1.0 else "#aaa"
        out.append(
            f'<rect x="{x + 2:.1f}" y="{mt + ph - h:.1f}" width="{bw - 4:.1f}" height="{h:.1f}" fill="{fill}">'
            f"<title>{escape(label)}: {c}</title></rect>"
        )
        if c:
            out.append(
                f'<text x="{x + bw / 2:.1f}" y="{mt + ph - h - 3:.1f}" font-size="10" '
                f'text-anchor="middle">{c}</text>'
            )
        out.append(
            f'<text x="{x + bw / 2:.1f}" y="{mt + ph + 12}" font-size="9" text-anchor="end" '
            f'transform="rotate(-35 {x + bw / 2:.1f} {mt + ph + 12})">{escape(label)}</text>'
        )
    one = ml + bw * 5  # the bin starting at 1x
    out.append(
        f'<line x1="{one:.1f}" x2="{one:.1f}" y1="{mt}" y2="{mt + ph}" stroke="#333" stroke-dasharray="4,3"/>'
    )
    out.append(
        f'<text x="{ml + pw / 2:.1f}" y="{height - 4}" font-size="12" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    out.append("</svg>")
    return "".join(out)


def stacked_bars(
    rows: Sequence[tuple[str, Mapping[str, int]]],
    *,
    title: str,
    order: Sequence[str],
    colors: Mapping[str, str] = OUTCOME_COLORS,
    width: int = 560,
    bar_h: int = 18,
) -> str:
    """Horizontal stacked bars of counts per category (e.g. verdicts per model and level).

    Args:
        rows: ``(label, {category: count})`` per bar.
        title: accessible title.
        order: category order (categories not listed are appended).
        colors: category -> colour.
    """
    cats = list(order) + sorted({c for _, d in rows for c in d} - set(order))
    used = [c for c in cats if any(d.get(c, 0) for _, d in rows)]
    ml, mr, mt = 150, 10, 6
    pw = width - ml - mr
    legend_rows = (len(used) + 3) // 4
    height = mt + len(rows) * (bar_h + 6) + 10 + 16 * legend_rows
    out = [_svg_open(width, height, title, "chart bars")]
    for r, (label, d) in enumerate(rows):
        y = mt + r * (bar_h + 6)
        total = sum(d.values()) or 1
        x = float(ml)
        out.append(
            f'<text x="{ml - 6}" y="{y + bar_h - 5}" font-size="11" text-anchor="end">'
            f"{escape(_short(label, 24))}</text>"
        )
        for c in used:
            n = d.get(c, 0)
            if not n:
                continue
            w = pw * n / total
            out.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colors.get(c, "#999")}">'
                f"<title>{escape(label)}: {escape(c)} {n}</title></rect>"
            )
            if w > 18:
                out.append(
                    f'<text x="{x + w / 2:.1f}" y="{y + bar_h - 5}" font-size="10" text-anchor="middle" '
                    f'fill="#fff">{n}</text>'
                )
            x += w
    ly0 = mt + len(rows) * (bar_h + 6) + 12
    for i, c in enumerate(used):
        lx = ml + (i % 4) * (pw / 4) - 100
        ly = ly0 + 16 * (i // 4)
        out.append(
            f'<rect x="{lx:.1f}" y="{ly - 9}" width="10" height="10" fill="{colors.get(c, "#999")}"/>'
            f'<text x="{lx + 14:.1f}" y="{ly}" font-size="11">{escape(c)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"
