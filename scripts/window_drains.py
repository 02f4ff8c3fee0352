"""How long a sweep's device sat with a timing window asked for and none running (the windows' "drains").

    python scripts/window_drains.py --db results/sweep.db --run sweep-cached-all-6x [--first N] [--culprits S]

A window takes the device's host lock exclusively, so it waits for every other slot's stretch of untimed GPU
work under the shared hold to reach a point where it gives way; the slots that have already given way wait too.
For each window (``extra["timing_windows"]``: ``start``, ``end``, ``host_lock_wait_s``) its request is
``start - host_lock_wait_s``; its drain is the time from the later of its request and the end of the window
before it to its own start (no window running, one asked for). Prints the windows' count, their share of the
span (first request to last end), the drains' sum, mean, median, 90th percentile and maximum, and the largest
drains. ``--culprits S``: for each drain of at least S seconds, the other jobs running meanwhile with the
phases that can hold the device for long (``reference``: the set-up, ``construct``, ``slot_start``...) and,
for results stored with them (``extra["steps"]``), the steps each was in during the drain.
``--by-step``: the slot-seconds each step of the other jobs ran during the drains, summed (what the windows
waited for). ``--first N``: only the run's first N results in the order they were stored (a prefix, to compare runs cut
at different points).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lane_small_waits import load  # noqa: E402

_PHASES = ("memory_wait", "reference", "slot_start", "build", "construct", "trial_call_first", "slot_correctness",
           "slot_recheck", "yield_wait", "midstep_yields", "baselines")


def drains(rows: list[tuple]) -> list[tuple[float, float, float, str]]:
    """``(drain_s, asked_at, start, job)`` of each window of ``rows`` (see ``load``), in the order they started
    (epoch seconds)."""
    wins = sorted(((w["start"] - w.get("host_lock_wait_s", 0.0), w["start"], w["end"], f"L{lv}/{pid}")
                   for lv, pid, _ph, ex, _at in rows for w in ex.get("timing_windows", [])), key=lambda w: w[1])
    out, prev_end = [], float("-inf")
    for asked, start, end, job in wins:
        since = max(asked, prev_end)
        out.append((max(0.0, start - since), since, start, job))
        prev_end = max(prev_end, end)
    return out


def steps_in_drains(rows: list[tuple], ds: list[tuple[float, float, float, str]]) -> dict[str, float]:
    """Slot-seconds each step name (``extra["steps"]``) was running during the drains ``ds`` (see
    :func:`drains`), summed over the drains and over every job but the one whose window waited: what the
    windows waited for. Results stored without steps count nothing."""
    out: dict[str, float] = {}
    for drain_s, since, start, job in ds:
        if drain_s <= 0:
            continue
        for lv, pid, _ph, ex, _at in rows:
            if f"L{lv}/{pid}" == job:
                continue
            for name, sec in steps_during(ex, since, start):
                out[name] = out.get(name, 0.0) + sec
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--first", type=int, default=None, help="only the first N results stored")
    ap.add_argument("--top", type=int, default=10, help="the largest drains listed (default 10)")
    ap.add_argument("--culprits", type=float, default=None, metavar="S",
                    help="jobs running during each drain of at least S seconds")
    ap.add_argument("--by-step", action="store_true",
                    help="slot-seconds each step of the other jobs ran during the drains (results stored with steps)")
    a = ap.parse_args()
    if (a.first is not None and a.first < 1) or a.top < 1:
        ap.error("--first and --top take a count of 1 or more")
    try:
        rows = load(a.db, a.run, None, None)
    except Exception as e:  # noqa: BLE001 - a missing store or run: one line, not a traceback
        print(f"cannot read run {a.run!r} from {a.db}: {e}", file=sys.stderr)
        return 2
    if a.first is not None:
        rows = rows[: a.first]
    ds = drains(rows)
    if not ds:
        print(f"{a.run}: no timing windows")
        return 1
    wins = [w for _lv, _pid, _ph, ex, _at in rows for w in ex.get("timing_windows", [])]
    t0 = min(w["start"] - w.get("host_lock_wait_s", 0.0) for w in wins)
    t1 = max(w["end"] for w in wins)
    busy = sum(w["end"] - w["start"] for w in wins)
    d = sorted(x[0] for x in ds)
    print(f"{a.run}: {len(rows)} results, {len(wins)} windows over {t1 - t0:.1f} s; windows {busy:.1f} s "
          f"({busy / (t1 - t0):.1%}); drains {sum(d):.1f} s ({sum(d) / (t1 - t0):.1%}): mean {statistics.mean(d):.3f}, "
          f"median {statistics.median(d):.3f}, p90 {d[int(0.9 * (len(d) - 1))]:.3f}, max {d[-1]:.2f} s")
    if a.by_step:
        by = steps_in_drains(rows, ds)
        print("   during the drains, other jobs' steps (slot-seconds): "
              + (", ".join(f"{n} {v:.1f}" for n, v in sorted(by.items(), key=lambda kv: -kv[1]))
                 or "none stored (results from before H200 session 20's change)"))
    top = sorted(ds, reverse=True)[: a.top]
    print("   largest: " + ", ".join(f"{x[0]:.2f} s for {x[3]} at {x[1] - t0:.1f} s" for x in top))
    if a.culprits is not None:
        for drain_s, since, start, job in top:
            if drain_s < a.culprits:
                continue
            print(f"   drain {drain_s:.1f} s at {since - t0:.1f}-{start - t0:.1f} s before {job}'s window:")
            for lv, pid, ph, _ex, at in rows:
                began = at - ph["total"]
                if began < start and at > since and f"L{lv}/{pid}" != job:
                    phases = " ".join(f"{k}={ph[k]:.1f}" for k in _PHASES if ph.get(k))
                    print(f"      L{lv}/{pid} {began - t0:.1f}-{at - t0:.1f} s: {phases}")
                    during = steps_during(_ex, since, start)
                    if during:
                        print("         in the drain: " + ", ".join(f"{n} {s:.1f} s" for n, s in during))
    return 0


def steps_during(extra: dict, lo: float, hi: float) -> list[tuple[str, float]]:
    """``(step, seconds)`` of a job's ``extra["steps"]`` (``[name, start, end]``, epoch s; stored since H200
    session 20) overlapping ``[lo, hi]``, in order, with the seconds of each inside it; [] for results
    stored without steps."""
    out = []
    for step in extra.get("steps") or []:
        try:
            name, a, b = str(step[0]), float(step[1]), float(step[2])
        except (TypeError, ValueError, IndexError):
            continue
        inside = min(b, hi) - max(a, lo)
        if inside > 0:
            out.append((name, inside))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
