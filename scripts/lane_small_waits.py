"""Where large and small jobs of a sweep waited: memory, giving way to other slots' windows, their own window's lock.

    python scripts/lane_small_waits.py --db results/sweep.db --run sweep-cached-all-6u [--since T] [--until T] [--timeline]

A job is counted "large" when its memory claim (``extra["memory_claim"]``, a fraction of the device) is over
``--large-claim`` (0.3): the lane's jobs and mid-size ones beside them. Per class: jobs, the mean seconds in the
slot (``phase_s["total"]``), waiting for memory (``memory_wait``), giving way to other slots' timing windows
(``yield_wait``) and waiting for the device's lock for its own windows (``host_lock_wait_s``); the span of the
large jobs (first start to last end) over their number; the slot-seconds of both waits in all. Times are the
stores' (UTC, ``YYYY-MM-DD HH:MM[:SS]``); ``--since``/``--until`` pick one call of a run resumed over several.
``--timeline``: each large job's start and end (seconds from the first job's start), claim and waits.
``--peaks``: each large job's claim in GiB beside the trusted process's allocator peak
(``trusted_device_peak_bytes``: PyTorch's reserved high-water mark, which leaves out the shared buffers the driver
allocates directly) and the candidate process's (``candidate_device_peak_bytes``).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: an H200's device memory (bytes), for records without the device's total
H200_BYTES = 150_109_880_320
GIB = 1 << 30


def utc_time(text: str) -> datetime:
    """``--since``/``--until``: a UTC time such as ``2026-12-02 22:50``."""
    try:
        return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time; give one like '2026-12-02 22:50'") from None


def load(db: str, run: str, lo: datetime | None, hi: datetime | None) -> list[tuple]:
    """``(level, problem_id, phase_s, extra, stored at (epoch s))`` of each of ``run``'s results in ``db``, in the
    order they were stored, from ``lo`` to ``hi`` (UTC; None: no bound)."""
    from kernelbench_harness.store import Store

    out = []
    for at in sorted(Store(db, create=False).attempts(run), key=lambda at: at.created_at):
        if (lo and at.created_at < lo) or (hi and at.created_at > hi):
            continue
        out.append((at.level, at.problem_id, at.result.phase_s, at.result.extra, at.created_at.timestamp()))
    return out


def summary(label: str, rows: list[tuple], large_claim: float) -> str:
    if not rows:
        return f"{label}: no results"

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    large = [r for r in rows if (r[3].get("memory_claim") or 0) > large_claim]
    small = [r for r in rows if (r[3].get("memory_claim") or 0) <= large_claim]
    t0 = min(r[4] - r[2]["total"] for r in rows)
    t1 = max(r[4] for r in rows)
    lines = [f"{label}: results {len(rows)} span {t1 - t0:.1f} s"]
    if large:
        ls, le = min(r[4] - r[2]["total"] for r in large), max(r[4] for r in large)
        lines[0] += f"; large jobs {len(large)} (claim>{large_claim}) span {le - ls:.1f} s = {(le - ls) / len(large):.2f} s each"
    for name, group in (("large", large), ("small", small)):
        own = [sum(w.get("host_lock_wait_s", 0) for w in r[3].get("timing_windows", [])) for r in group]
        lines.append(f"   {name:5s} n={len(group):3d} total {mean([r[2]['total'] for r in group]):5.2f} "
                     f"memory_wait {mean([r[2].get('memory_wait', 0) for r in group]):5.2f} "
                     f"yield_wait {mean([r[2].get('yield_wait', 0) for r in group]):5.2f} own-window lock wait {mean(own):5.2f}")
    lines.append(f"   slot-seconds waiting for memory: {sum(r[2].get('memory_wait', 0) for r in rows):.0f}, "
                 f"giving way: {sum(r[2].get('yield_wait', 0) for r in rows):.0f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--since", default=None, type=utc_time)
    ap.add_argument("--until", default=None, type=utc_time)
    ap.add_argument("--label", default=None)
    ap.add_argument("--large-claim", type=float, default=0.3)
    ap.add_argument("--timeline", action="store_true")
    ap.add_argument("--peaks", action="store_true")
    a = ap.parse_args()
    rows = load(a.db, a.run, a.since, a.until)
    print(summary(a.label or a.run, rows, a.large_claim))
    if a.timeline and rows:
        t0 = min(r[4] - r[2]["total"] for r in rows)
        for level, pid, phase, extra, end in rows:
            claim = extra.get("memory_claim") or 0
            if claim > a.large_claim:
                print(f"   {end - phase['total'] - t0:7.1f} {end - t0:7.1f} L{level}/{pid:<3} claim {claim:.2f} "
                      f"memory_wait {phase.get('memory_wait', 0):5.1f} yield_wait {phase.get('yield_wait', 0):5.1f} "
                      f"total {phase['total']:5.1f}")
    if a.peaks:
        from kernelbench_harness.execution.memledger import UTIL

        print("   job      claim GiB  trusted peak  candidate peak  (allocator peaks, GiB; exchange, timing sets)")
        for level, pid, _phase, extra, _end in rows:
            claim = extra.get("memory_claim") or 0
            if claim > a.large_claim and extra.get("trusted_device_peak_bytes"):
                total = (extra.get("trusted_memory") or {}).get("device_total_bytes") or H200_BYTES
                print(f"   L{level}/{pid:<4} {claim * UTIL * total / GIB:9.1f} {extra['trusted_device_peak_bytes'] / GIB:13.1f} "
                      f"{(extra.get('candidate_device_peak_bytes') or 0) / GIB:15.1f}  "
                      f"{extra.get('input_exchange')}, {extra.get('timing_sets')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
