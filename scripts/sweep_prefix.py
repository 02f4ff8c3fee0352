"""Runs of one sweep in the same order, compared on the same prefix: seconds from the first job's start to the n-th result.

    python scripts/sweep_prefix.py RUN=DB[@UNTIL] ... [--at 50,100,150,184]

Each argument names a run and the SQLite store holding it, and optionally a UTC time (``2026-12-03T02:53``) after
which its results are left out (one call of a run resumed over several). Runs of the same problems in the same
order reach their n-th result after the same work, so the times compare like for like where the runs stopped at
different points. A job's start is its result's time less its ``phase_s["total"]`` (seconds in the slot).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lane_small_waits import load, utc_time  # noqa: E402  (one reader of a run's results, one time format)


def result_times(db: str, run: str, until: datetime | None) -> list[float]:
    """Seconds from the run's first job start to each of its results, in order (results after ``until`` left out).

    Raises:
        SystemExit: the store or the run is missing, or the run has no results in ``db`` up to ``until``.
    """
    from kernelbench_harness.errors import StoreError

    try:
        rows = load(db, run, None, until)
    except StoreError as e:
        raise SystemExit(f"{db}: {e}") from None
    if not rows:
        raise SystemExit(f"{run} has no results in {db}" + (f" up to {until}" if until else ""))
    t0 = min(at - float(phase.get("total", 0.0)) for _l, _p, phase, _e, at in rows)
    return [at - t0 for *_rest, at in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="RUN=DB[@UNTIL]")
    ap.add_argument("--at", default="50,100,150", help="result counts to report (comma-separated)")
    args = ap.parse_args()
    try:
        at = [int(x) for x in args.at.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--at {args.at!r}: expected comma-separated counts such as 50,100,150")
    for spec in args.runs:
        run, sep, rest = spec.partition("=")
        if not sep or not rest:
            ap.error(f"{spec!r}: expected RUN=DB or RUN=DB@UNTIL")
        db, _, until_text = rest.partition("@")
        until = None
        if until_text:
            try:
                until = utc_time(until_text)
            except argparse.ArgumentTypeError as e:
                ap.error(str(e))
        t = result_times(db, run, until)
        parts = [f"n={n}: {t[n - 1]:.1f} s" for n in at if n <= len(t)]
        print(f"{run}: {len(t)} results; first {t[0]:.1f} s after the first job started; " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
