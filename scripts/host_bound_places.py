"""Where each host-bound time was measured: its value next to the CPU (and NUMA node, MHz) its timing process ran on.

    python scripts/host_bound_places.py --db results/kbrepeat/repeat-kbench-A.db [--db ...B.db] [--all]

For every result of every run in the given SQLite stores, the times the evaluator flagged host-bound
(``extra["host_bound"]``: the candidate's, eager's or torch.compile's time was the host's pace of issuing launches)
are printed one per line with the window's ``timer_cpu``, ``timer_node`` and ``timer_mhz`` (start, end), recorded
since 2026-12-04. With ``--all``, the GPU-bound times too, as a control. H200 session 27 saw the same host-bound
calls take one of two levels, up to 2.4x apart, in different processes on a quiet host: these lines show whether
the level follows the core.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

ROWS = """
select ru.run_name, s.level, s.problem_id, s.model, r.candidate_ms, r.eager_ms, r.compile_ms, r.extra
from results r join attempts a on r.attempt_pk = a.id join samples s on a.sample_pk = s.id
join runs ru on s.run_id = ru.id order by s.level, s.problem_id, s.model, ru.run_name
"""


def places(db: Path, everything: bool = False) -> list[dict]:
    """One dict per (result, timed callable): run, problem key, model, callable, ms, host_bound, and the
    place fields of its last window. Raises ``sqlite3.Error`` for a file that is not a kbench store."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(ROWS).fetchall()
    finally:
        con.close()
    out = []
    for run, level, pid, model, cand_ms, eager_ms, compile_ms, extra_text in rows:
        extra = json.loads(extra_text or "{}") or {}
        flagged = set(extra.get("host_bound") or [])
        windows = {"candidate": (extra.get("timing_windows") or [None])[-1]}
        for mode, info in (extra.get("baseline_info") or {}).items():
            info = info or {}
            windows[mode] = (info.get("windows") or [info.get("window")])[-1]
        ms = {"candidate": cand_ms, "eager": eager_ms}
        ms.update({m: compile_ms for m in windows if m.startswith("compile:")})
        for what, w in windows.items():
            if w is None or (what not in flagged and not everything):
                continue
            out.append({"run": run, "key": f"L{level}/{pid}", "model": model, "what": what, "ms": ms.get(what),
                        "host_bound": what in flagged, **{k: w.get(k) for k in
                                                          ("timer_cpu", "timer_node", "timer_mhz", "gpu_node")}})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", action="append", required=True, type=Path, help="a kbench SQLite store (repeatable)")
    ap.add_argument("--all", action="store_true", help="GPU-bound times too")
    a = ap.parse_args()
    for db in a.db:
        if not db.exists():
            ap.error(f"no store at {db}")
        try:
            lines = places(db, a.all)
        except sqlite3.Error as e:
            print(f"{db}: not a kbench store ({e})", file=sys.stderr)
            return 2
        for p in lines:
            ms = f"{p['ms']:.4f}" if p["ms"] is not None else "-"
            print(f"{p['run']:28s} {p['key']:7s} {p['model'][:18]:18s} {p['what']:16s} {ms:>9s} ms "
                  f"{'host-bound' if p['host_bound'] else 'gpu-bound ':10s} cpu {p['timer_cpu']} node {p['timer_node']} "
                  f"mhz {p['timer_mhz']} gpu_node {p['gpu_node']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
