"""Compare a replay run of kernelsseum-v0 candidates with what the original harness reported.

Usage:
    python scripts/compare_reported.py --db results/gpu.db --run kernelsseum-l1 \
        --generations ../shared/kernelsseum-v0/generations.jsonl [--csv out.csv]

Prints: the count per outcome; how many agree with the original verdict (every listed candidate was
judged correct originally); the run's wall time; geometric-mean speedups vs eager and
torch.compile over the candidates correct here, next to the originally reported ones (L40S) over
the same candidates and over all candidates.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path


def _geo(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--generations", required=True)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--level", type=int, action="append", default=None,
                    help="only these levels (repeatable); all levels of the run by default")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kernelbench_harness.store import Store

    st = Store(a.db, create=False)
    info = st.get_run(a.run)
    if info is None:
        print(f"no run {a.run!r} in {a.db}")
        return 2
    df = st.results_frame(a.run)
    if a.level:
        df = df[df["level"].isin(a.level)]
    gens = [json.loads(line) for line in Path(a.generations).read_text().splitlines() if line.strip()]
    # replay sample ids: index among lines of the same (level, problem_id, model), in file order
    seen: Counter[tuple[int, int, str]] = Counter()
    rep: dict[tuple[int, int, str, int], dict] = {}
    for g in gens:
        k = (g["level"], g["problem_id"], g["model"])
        rep[(*k, g.get("sample_id", seen[k]))] = g.get("reported") or {}
        seen[k] += 1
    rows = []
    for r in df.itertuples():
        rp = rep.get((r.level, r.problem_id, r.model, r.sample_id), {})
        rows.append({"level": r.level, "problem_id": r.problem_id, "name": r.name, "model": r.model,
                     "sample_id": r.sample_id, "outcome": r.outcome, "tag": r.tag,
                     "candidate_ms": r.candidate_ms, "eager_ms": r.eager_ms, "compile_ms": r.compile_ms,
                     "speedup_eager": r.speedup_eager, "speedup_compile": r.speedup_compile,
                     "max_abs_err": r.max_abs_err, "allclose_kernelbench": getattr(r, "allclose_kernelbench", None),
                     "rep_kernel_ms": rp.get("kernel_ms"), "rep_eager_ms": rp.get("eager_ms"),
                     "rep_compile_ms": rp.get("torch_compile_ms"), "rep_speedup_eager": rp.get("speedup_eager"),
                     "rep_speedup_compile": rp.get("speedup_torch_compile"), "error": (r.error or "")[:200]})
    counts = Counter(r["outcome"] + (f"({r['tag']})" if r["tag"] else "") for r in rows)
    scope = f" (levels {', '.join(map(str, a.level))})" if a.level else ""
    print(f"run {a.run}{scope}: {len(rows)} candidates; protocol {info.protocol.get('name')}; "
          f"hardware {info.hardware.get('device_name')}")
    for k, v in counts.most_common():
        print(f"  {k:32s} {v}")
    agree = sum(1 for r in rows if r["outcome"] == "correct")
    print(f"agree with the original verdict (correct): {agree}/{len(rows)}")
    if info.created_at and info.finished_at:
        print(f"wall time: {(info.finished_at - info.created_at).total_seconds():.0f} s (run created -> finished)")
    ok = [r for r in rows if r["outcome"] == "correct"]
    fmt = lambda x: "-" if x is None else f"{x:.3f}x"  # noqa: E731
    print(f"geomean speedup over the {len(ok)} correct here:   vs eager {fmt(_geo([r['speedup_eager'] for r in ok]))}"
          f"   vs torch.compile {fmt(_geo([r['speedup_compile'] for r in ok]))}")
    print(f"  reported (L40S), same candidates:        vs eager {fmt(_geo([r['rep_speedup_eager'] for r in ok]))}"
          f"   vs torch.compile {fmt(_geo([r['rep_speedup_compile'] for r in ok]))}")
    print(f"  reported (L40S), all {len(rows)} candidates:      vs eager "
          f"{fmt(_geo([r['rep_speedup_eager'] for r in rows]))}   vs torch.compile "
          f"{fmt(_geo([r['rep_speedup_compile'] for r in rows]))}")
    print(f"median eager ms here {_median([r['eager_ms'] for r in ok])} vs reported "
          f"{_median([r['rep_eager_ms'] for r in ok])}; median torch.compile ms here "
          f"{_median([r['compile_ms'] for r in ok])} vs reported {_median([r['rep_compile_ms'] for r in ok])}")
    if a.csv:
        import csv

        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"per-candidate table: {a.csv}")
    return 0


def _median(xs: list[float | None]) -> str:
    v = sorted(x for x in xs if x is not None and math.isfinite(x))
    if not v:
        return "-"
    m = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return f"{m:.4g}"


if __name__ == "__main__":
    raise SystemExit(main())
