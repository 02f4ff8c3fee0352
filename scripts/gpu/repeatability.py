#!/usr/bin/env python3
"""Issue 3's repeatability: the same level-1 candidates evaluated in separate runs, per protocol.

    python3 scripts/gpu/repeatability.py --store results/gpu3.db --run kernelsseum \
        --generations .data/kernelsseum-v0/generations.jsonl --problems .data/kernelsseum-v0/problems \
        --out $OUT [--n 20] [--protocols kbench,kernelbench] [--repeats 2]

Picks ``--n`` level-1 candidates that the run ``--run`` in ``--store`` judged correct (by problem id,
then model; if the store has none, the first ``--n`` level-1 generations), writes them to a replay
file and evaluates them with ``kbench run`` once per (repeat, protocol), interleaved (A kbench,
A kernelbench, B kbench, B kernelbench) so that drift of the machine touches both protocols alike.
Each run has its own store, so eager and torch.compile are measured again each time (nothing is
reused across runs except compiled extensions and Inductor's on-disk cache, which hold no timings).

Writes ``repeat.json`` to ``--out``: per run and candidate the verdict, times (ms) and speedups, and
per protocol the median and 95th percentile of |speedup_A - speedup_B| / mean(speedup_A, speedup_B)
over candidates correct in both runs (vs eager and vs torch.compile). Needs a CUDA GPU for figures
that mean anything; runs anywhere for a smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep import has_run  # noqa: E402  (one copy of the store check)

REPO = Path(__file__).resolve().parents[2]

ROWS_SQL = """
select s.level, s.problem_id, s.model, s.sample_id, r.outcome, r.tag, r.speedup_eager, r.speedup_compile,
       r.candidate_ms, r.eager_ms, r.compile_ms, r.max_abs_err, r.allclose_kernelbench,
       json_extract(r.extra, '$.host_bound')
from results r join attempts a on r.attempt_pk = a.id join samples s on a.sample_pk = s.id
join runs ru on s.run_id = ru.id where ru.run_name = ? order by s.level, s.problem_id, s.model, s.sample_id
"""
COLS = ("level", "problem_id", "model", "sample_id", "outcome", "tag", "speedup_eager", "speedup_compile",
        "candidate_ms", "eager_ms", "compile_ms", "max_abs_err", "allclose_kernelbench",
        "host_bound")


def read_rows(db: Path, run: str) -> list[dict]:
    """Result rows of ``run`` in the SQLite store ``db`` (empty when the store or run is missing)."""
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [dict(zip(COLS, r)) for r in con.execute(ROWS_SQL, (run,))]
    except sqlite3.Error:
        return []
    finally:
        con.close()


def pick(store: Path, run: str, generations: Path, n: int, ids: set[int] | None = None) -> list[dict]:
    """``n`` level-1 generations: those the stored run judged correct first, by problem id and model (only
    problems in ``ids`` when given)."""
    gens = [json.loads(x) for x in generations.read_text().splitlines() if x.strip()]
    gens = [g for g in gens if int(g["level"]) == 1 and (ids is None or int(g["problem_id"]) in ids)]
    correct = {(r["problem_id"], r["model"]) for r in read_rows(store, run) if r["level"] == 1
               and r["outcome"] == "correct"}
    seen: set[tuple[int, str]] = set()
    chosen: list[dict] = []
    order = sorted(gens, key=lambda g: ((int(g["problem_id"]), g.get("model") or "") not in correct,
                                        int(g["problem_id"]), g.get("model") or ""))
    for g in order:
        key = (int(g["problem_id"]), g.get("model") or "")
        if key in seen:
            continue  # one candidate per (problem, model): the replay pairs them by that key
        seen.add(key)
        chosen.append(g)
        if len(chosen) == n:
            break
    return chosen


def _flags(row: dict) -> list[str]:
    """The host-bound callables of a result row (``extra["host_bound"]``, stored as JSON text)."""
    v = row.get("host_bound")
    return list(json.loads(v)) if isinstance(v, str) else list(v or [])


def rel_delta(a: float, b: float) -> float:
    return abs(a - b) / ((a + b) / 2.0)


def summarize(a: list[dict], b: list[dict], split_host_bound: bool = True) -> dict:
    """Median and p95 of the relative speedup difference between runs A and B, per baseline.

    With ``split_host_bound``, the same figures again (``gpu_bound``) over the candidates whose times were all
    GPU-bound in both runs, and each host-bound one (``host_bound``: a time the evaluator flagged as set by the
    host issuing launches, in either run; its result's ``extra["host_bound"]``) with its differences apart:
    such a time is the host's launch rate, which moves between processes (reports mark it approximate)."""
    ka = {(r["problem_id"], r["model"]): r for r in a}
    kb = {(r["problem_id"], r["model"]): r for r in b}
    if split_host_bound:
        hb = {k for k in set(ka) & set(kb) if ka[k].get("host_bound") or kb[k].get("host_bound")}
        out = summarize([r for k, r in ka.items() if k not in hb], [r for k, r in kb.items() if k not in hb],
                        split_host_bound=False)
        out["gpu_bound"] = {k: v for k, v in out.items()}
        out.update(summarize(a, b, split_host_bound=False))
        out["host_bound"] = [
            {"problem_id": k[0], "model": k[1], "flagged": sorted({*_flags(ka[k]), *_flags(kb[k])}),
             **{c: [ka[k][c], kb[k][c]] for c in ("candidate_ms", "eager_ms", "compile_ms")},
             **{f"{c}_rel_delta": rel_delta(ka[k][c], kb[k][c]) for c in ("speedup_eager", "speedup_compile")
                if ka[k][c] and kb[k][c]}}
            for k in sorted(hb)]
        return out
    out: dict = {"n_both": 0, "verdicts_equal": 0, "n_common": 0}
    common = sorted(set(ka) & set(kb))
    out["n_common"] = len(common)
    out["verdicts_equal"] = sum(ka[k]["outcome"] == kb[k]["outcome"] for k in common)
    # the speedups (the target), and their parts: where a speedup's spread comes from
    for base in ("speedup_eager", "speedup_compile", "candidate_ms", "eager_ms", "compile_ms"):
        d = [rel_delta(ka[k][base], kb[k][base]) for k in common
             if ka[k]["outcome"] == kb[k]["outcome"] == "correct" and ka[k][base] and kb[k][base]]
        out["n_both"] = max(out["n_both"], len(d))
        if d:
            out[base] = {"n": len(d), "median_rel_delta": statistics.median(d),
                         "p95_rel_delta": float(numpy.percentile(d, 95)),
                         "max_rel_delta": max(d)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, required=True, help="SQLite store holding --run (for the choice)")
    ap.add_argument("--run", default="kernelsseum")
    ap.add_argument("--generations", type=Path, required=True)
    ap.add_argument("--problems", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, default=20)
    def id_set(text: str) -> set[int] | None:
        try:
            return {int(x) for x in text.split(",") if x.strip()} or None
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: give problem ids separated by commas, e.g. 1,2,12") from None

    ap.add_argument("--ids", default=None, type=id_set,
                    help="only these level-1 problems, e.g. 1,2,3,4,5,12 (default: any)")
    ap.add_argument("--protocols", default="kbench,kernelbench",
                    help="comma-separated; an entry may change protocol settings after a colon, separated by "
                         "'+': kbench:hide_launch=true+placements=4 (passed to kbench run as -P KEY=VALUE)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--kbench-args", default="", help="more arguments for kbench run, e.g. '--quiet-host'")
    ap.add_argument("--tag", default="", help="added to the run names (runs with other --kbench-args)")
    ap.add_argument("--warm-workers", default="6")
    ap.add_argument("--work", type=Path, default=REPO / "results" / "kbrepeat",
                    help="stores and the replay file; a second call with the same folder continues: a finished "
                         "run is reused, a cut one resumed (kbench run --resume)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    chosen = pick(a.store, a.run, a.generations, a.n, a.ids)
    work = a.work
    work.mkdir(parents=True, exist_ok=True)
    sel = work / "selected.jsonl"
    sel.write_text("".join(json.dumps(g) + "\n" for g in chosen))
    ids = ",".join(str(i) for i in sorted({int(g["problem_id"]) for g in chosen}))
    protocols = [p for p in a.protocols.split(",") if p]
    report: dict = {"chosen": [[int(g["problem_id"]), g.get("model")] for g in chosen], "runs": {}, "summary": {}}
    out_json = a.out / "repeat.json"
    before = json.loads((work / "repeat.json").read_text()) if (work / "repeat.json").exists() else {}
    env = dict(os.environ)

    def label(proto: str) -> str:
        """The protocol entry as the report names it: with the tag, runs under other kbench arguments."""
        return f"{proto}@{a.tag}" if a.tag else proto
    for rep in "ABCDEFGH"[: a.repeats]:
        for proto in protocols:
            base, _, opts = proto.partition(":")
            name = f"repeat-{proto.replace(':', '-').replace('+', '-').replace('=', '')}{'-' + a.tag if a.tag else ''}-{rep}"
            db = work / f"{name}.db"
            rows = read_rows(db, name)
            earlier = (before.get("runs") or {}).get(name) or {}
            if len(rows) >= len(chosen):  # finished in an earlier call
                report["runs"][name] = {**earlier, "protocol": label(proto), "repeat": rep, "rows": rows}
                print(f"{name}: reused ({len(rows)} results)", flush=True)
                continue
            t0 = time.monotonic()
            cmd = [sys.executable, "-m", "kernelbench_harness", "run", "--model", f"replay:{sel}",
                   "--problems", a.problems, "--level", "1", "--ids", ids, "--protocol", base,
                   *[x for o in opts.split("+") if o for x in ("-P", o)],
                   "--db", str(db), "--run-name", name, "--no-report", "--display", "plain",
                   "--warm-workers", a.warm_workers, *a.kbench_args.split()]
            if has_run(db, name):
                cmd.append("--resume")
            p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
            rows = read_rows(db, name)
            wall = round(time.monotonic() - t0 + float(earlier.get("wall_s") or 0.0), 1)
            report["runs"][name] = {"protocol": label(proto), "repeat": rep, "wall_s": wall, "calls": int(earlier.get("calls") or 0) + 1,
                                    "rc": p.returncode, "rows": rows, "log_tail": (p.stdout + p.stderr)[-3000:]}
            (work / "repeat.json").write_text(json.dumps(report, indent=1, default=str))
            print(f"{name}: rc={p.returncode} {len(rows)} results in {time.monotonic() - t0:.0f} s", flush=True)
            for pr in map(label, protocols):
                runs = [report["runs"][k]["rows"] for k in sorted(report["runs"]) if report["runs"][k]["protocol"] == pr]
                if len(runs) >= 2:
                    report["summary"][pr] = summarize(runs[0], runs[1])
            out_json.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
