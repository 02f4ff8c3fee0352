"""The large jobs of a run on its clock: when each started in its slot and ended, its claim, and its waits.

    python scripts/large_jobs_timeline.py --db results/sweep.db --run sweep-cached-s24b [--min-claim 0.3]

One line per job whose memory claim is above ``--min-claim`` (a fraction of the device), in order of start:
start and end (seconds from the run's row), claim, memory wait, physical memory wait and the reference's set-up
(seconds). Two that overlap ran at once; a start with a long memory wait waited for another's memory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--min-claim", type=float, default=0.3)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kernelbench_harness.errors import StoreError
    from kernelbench_harness.store import Store

    try:
        st = Store(a.db, create=False)
    except StoreError as e:
        ap.error(str(e))
    info = st.get_run(a.run)
    if info is None or info.created_at is None:
        print(f"no run {a.run}")
        return 1
    t0 = info.created_at.timestamp()
    rows = []
    for at in st.attempts(a.run):
        x, p = at.result.extra or {}, at.result.phase_s or {}
        claim = float(x.get("memory_claim") or 0)
        if claim <= a.min_claim or not at.created_at or "total" not in p:
            continue
        end = at.created_at.timestamp() - t0
        rows.append((end - float(p["total"]), end, f"L{at.level}/{at.problem_id}", claim,
                     float(p.get("memory_wait", 0)), float(p.get("memory_wait_physical", 0)), float(p.get("reference", 0))))
    for s, e, k, c, mw, mp, ref in sorted(rows):
        print(f"{k:7s} start {s:6.1f} end {e:6.1f} claim {c:.2f} memory_wait {mw:5.1f} physical {mp:4.1f} "
              f"reference {ref:4.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
