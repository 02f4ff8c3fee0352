"""Two runs of the same candidates side by side: verdicts that differ, how far the candidates' times moved, and
where the large jobs' seconds went in each.

    python scripts/compare_sweeps.py --a s28a.db:sweep-cached-s28a --b s28b.db:sweep-cached-s28b [--large 0.3]

Each side is ``STORE:RUN`` (a SQLite store and a run name in it). Printed:
- every problem whose outcome differs, with the two custom-kernel shares (the kernel-share verdict's input);
- |Δ candidate_ms| / candidate_ms of A over the problems timed in both, median, p95 (linear between order
  statistics) and max, in three parts with the largest rows of each named: the rows with no host-bound time in
  either run, those where only a baseline's time was host-bound (the problem's ``host-bound`` flag: a candidate
  doing the same work is paced by the host too), and those whose candidate time was host-bound in either run
  (``extra["host_bound"]``);
- per run, the mean of each ``phase_s`` key over the large jobs (``extra["memory_claim"]`` above ``--large``).
H200 session 28 (``docs/gpu/2026-12-04-s28/``) compared two whole cached sweeps this way. Its first version split
the rows by the candidate's flag alone and took the p95 as the order statistic below it; session 29 found the
largest moves in rows whose eager time was host-bound and whose candidate, timed without launch hiding, could not
yet be flagged.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROWS = """
select s.level, s.problem_id, r.outcome, r.tag, r.candidate_ms, r.phase_s, r.extra
from results r join attempts a on r.attempt_pk = a.id join samples s on a.sample_pk = s.id
join runs ru on s.run_id = ru.id where ru.run_name = ?
"""


def load(spec: str) -> dict[tuple[int, int], dict]:
    """``STORE:RUN`` -> {(level, problem_id): row}. Raises ``SystemExit`` naming the fix for a bad spec."""
    store, _, run = spec.rpartition(":")
    if not store or not run or not Path(store).is_file():
        raise SystemExit(f"{spec!r}: expected STORE:RUN with STORE an existing SQLite file")
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = con.execute(ROWS, (run,)).fetchall()
    finally:
        con.close()
    if not rows:
        raise SystemExit(f"{spec!r}: no results of run {run!r} in {store} (kbench runs list --db {store})")
    out = {}
    for level, pid, outcome, tag, ms, phase, extra in rows:
        extra = json.loads(extra or "{}") or {}
        out[(level, pid)] = {"outcome": outcome, "tag": tag or "", "ms": ms, "phase": json.loads(phase or "{}") or {},
                             "host_bound": "candidate" in (extra.get("host_bound") or []),
                             "baseline_host_bound": bool(set(extra.get("host_bound") or []) - {"candidate"}),
                             "share": extra.get("custom_kernel_share"), "claim": extra.get("memory_claim") or 0.0}
    return out


def p95(ds: list[float]) -> float:
    """The 95th percentile of ``ds`` (non-empty), linear between the order statistics around rank 0.95 (n - 1)
    (numpy's default method)."""
    return float(np.percentile(ds, 95))


def _quantiles(ds: list[float]) -> str:
    return (f"median {statistics.median(ds):.2%}, p95 {p95(ds):.2%}, max {max(ds):.2%}" if ds else "none")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="STORE:RUN")
    ap.add_argument("--b", required=True, help="STORE:RUN")
    ap.add_argument("--large", type=float, default=0.3, help="a large job's memory claim is above this share")
    a = ap.parse_args(argv)
    A, B = load(a.a), load(a.b)
    both = sorted(A.keys() & B.keys())
    print(f"{len(both)} problems in both ({len(A)} in A, {len(B)} in B)")
    flips = [k for k in both if (A[k]["outcome"], A[k]["tag"]) != (B[k]["outcome"], B[k]["tag"])]
    print(f"outcomes that differ: {len(flips)}")
    for k in flips:
        fa, fb = A[k], B[k]
        print(f"  L{k[0]}/{k[1]}: A {fa['outcome']}({fa['tag']}) share {fa['share']}  B {fb['outcome']}({fb['tag']}) "
              f"share {fb['share']}")
    parts: dict[str, list[tuple[float, tuple[int, int]]]] = {
        "no host-bound time": [], "host-bound baseline only": [], "host-bound candidate": []}
    for k in both:
        ma, mb = A[k]["ms"], B[k]["ms"]
        if ma and mb:
            part = ("host-bound candidate" if A[k]["host_bound"] or B[k]["host_bound"] else
                    "host-bound baseline only" if A[k]["baseline_host_bound"] or B[k]["baseline_host_bound"] else
                    "no host-bound time")
            parts[part].append((abs(ma - mb) / ma, k))
    for part, xs in parts.items():
        worst = ", ".join(f"L{k[0]}/{k[1]} {A[k]['ms']:.3f}/{B[k]['ms']:.3f} ms" for _, k in sorted(xs)[-5:][::-1])
        print(f"candidate_ms |A-B|/A, {part} ({len(xs)}): {_quantiles([d for d, _ in xs])}; largest: {worst}")
    for name, side in (("A", A), ("B", B)):
        large = [r for r in side.values() if r["claim"] > a.large]
        tot: Counter = Counter()
        for r in large:
            tot.update({k: v for k, v in r["phase"].items() if isinstance(v, (int, float))})
        top = ", ".join(f"{k} {v / len(large):.2f}" for k, v in tot.most_common(14)) if large else "-"
        print(f"{name}: {len(large)} large jobs, mean phase_s: {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
