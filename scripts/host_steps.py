"""Per-step seconds of runs of one sweep against a first run, problem by problem (issue 7).

    python scripts/host_steps.py REF_RUN=DB OTHER_RUN=DB [OTHER_RUN=DB ...]

For each step recorded in the results' ``phase_s`` (the candidate's process start ``slot_start``, its ``build``
and ``construct``, its first call ``trial_call_first``, the trusted side's ``reference`` set-up...), prints the
median over the problems both runs have of (the other run's seconds / the first run's) and each run's median
seconds. Host-side steps slower by a like factor in every run point to a slower host, not to the code: in H200
session 20, two runs on one machine took 1.7-2.0 times as long as session 19's ``all-6x`` for the build and the
first call, and so did a run of session 19 on another machine. Results stored before session 20's change count
in ``build`` and ``construct`` the time the candidate's process was stopped mid-step for other slots' windows;
later ones store it apart (``build_stopped``, ``construct_stopped``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lane_small_waits import load  # noqa: E402

STEPS = ("slot_start", "build", "construct", "trial_call_first", "trial_call", "reference", "compare",
         "slot_timing", "slot_correctness", "memory_wait", "yield_wait")


def ratios(ref: dict, other: dict, step: str, floor_s: float = 0.05) -> list[float]:
    """``other[p][step] / ref[p][step]`` for each problem ``p`` both have, where the first run's step took at
    least ``floor_s`` seconds and the other's more than 0 (``ref``, ``other``: problem -> ``phase_s``)."""
    out = []
    for p, ph in ref.items():
        a, b = ph.get(step), (other.get(p) or {}).get(step)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a >= floor_s and b > 0:
            out.append(b / a)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="RUN=DB", help="the first is the one the others are divided by")
    a = ap.parse_args()
    if len(a.runs) < 2 or any("=" not in r for r in a.runs):
        ap.error("give two or more RUN=DB")
    data = {}
    for spec in a.runs:
        run, db = spec.split("=", 1)
        try:
            data[run] = {(lv, pid): ph for lv, pid, ph, _ex, _at in load(db, run, None, None)}
        except Exception as e:  # noqa: BLE001 - a missing store or run: one line, not a traceback
            print(f"cannot read run {run!r} from {db}: {e}", file=sys.stderr)
            return 2
    names = list(data)
    ref = data[names[0]]
    for step in STEPS:
        cells = [f"{names[0]} median {statistics.median([ph.get(step) or 0.0 for ph in ref.values()]):.3f} s"]
        for n in names[1:]:
            r = ratios(ref, data[n], step)
            med = statistics.median([ph.get(step) or 0.0 for ph in data[n].values()])
            cells.append(f"{n} x{statistics.median(r):.2f} over {len(r)} ({med:.3f} s)" if r else f"{n} -")
        print(f"{step:17s} " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
