"""When a sweep's run reached its n-th result, read from its progress log (``--display plain``): seconds since the
run's start, by linear interpolation between the progress lines. For runs whose store was lost (a machine given
back), where ``scripts/sweep_prefix.py`` cannot read the stored results::

    python scripts/sweep_log_progress.py LOG [LOG ...] [--n 25,50,100,150,168,200,229]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

_LINE = re.compile(r"\[\s*([\d.]+)s\] generate (\d+)/(\d+)")


def points(path: Path) -> list[tuple[float, int]]:
    """(seconds since the run's start, results so far) of each progress line."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if m:
            out.append((float(m.group(1)), int(m.group(2))))
    return out


def reached(pts: list[tuple[float, int]], n: int) -> float | None:
    """Seconds at which the n-th result came (interpolated), or None if the log never got there."""
    prev = (0.0, 0)
    for t, k in pts:
        if k >= n:
            t0, k0 = prev
            return t0 + (t - t0) * (n - k0) / max(1, k - k0)
        prev = (t, k)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--n", default="25,50,100,150,168,200,229")
    a = ap.parse_args()
    try:
        ns = [int(x) for x in a.n.split(",")]
    except ValueError:
        ap.error(f"--n {a.n!r}: give result counts separated by commas, e.g. 100,200,248")
    missing = [str(p) for p in a.logs if not p.is_file()]
    if missing:
        ap.error(f"no such log: {', '.join(missing)} (the run's progress log, e.g. sweep-cached-TAG.log)")
    for path in a.logs:
        pts = points(path)
        if not pts:
            print(f"{path.name}: no progress lines")
            continue
        cells = [f"n={n}: {r:.1f} s" if (r := reached(pts, n)) is not None else f"n={n}: -" for n in ns]
        print(f"{path.name}: last {pts[-1][1]} at {pts[-1][0]:.1f} s; " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
