#!/usr/bin/env python3
"""Issue 3's fidelity check: kbench's time for a candidate next to Nsight Compute's for the same launches.

    python3 scripts/gpu/ncu_fidelity.py --store results/gpu3.db --run kernelsseum --out $OUT/ncu.json [--n 5]

For ``--n`` level-1 candidates that the stored run judged correct (one per problem, lowest problem
ids first), in a child process per candidate and measurement:

- ``time``: the candidate's forward timed by kbench's own timing code (``time_callable`` with the
  ``kbench`` protocol's settings: CUDA events, L2 flush of at least twice the device's L2, adaptive
  trials, median);
- ``ncu``: the same forward on the same inputs run ``--iters`` times between ``cudaProfilerStart`` and
  ``cudaProfilerStop`` under ``ncu --clock-control none --profile-from-start off`` (caches flushed
  before each kernel, ncu's default); the kernels' ``gpu__time_duration.sum`` summed per forward.

Extensions load from kbench's build cache (``results/build_cache``), so nothing is compiled when the
run that chose the candidates built them on this machine. The candidate code and the problem source
come from the store, so the figures are for exactly what the run evaluated. This script is ours and
trusted; it imports the (already evaluated) candidates directly, which kbench's evaluator never does.
Writes one JSON object: per candidate kbench's median (ms), ncu's per-forward kernel sum (ms), the
kernels ncu saw, and their ratio.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SQL = """
select s.problem_id, s.model, a.code, p.code, r.candidate_ms
from results r join attempts a on r.attempt_pk = a.id join samples s on a.sample_pk = s.id
join runs ru on s.run_id = ru.id join problems p on p.id = s.problem_pk
where ru.run_name = ? and s.level = 1 and r.outcome = 'correct' order by s.problem_id, s.model
"""


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def inner(workdir: Path, mode: str, iters: int) -> None:
    """Child: build (from cache), set up inputs, then time (``mode=time``) or run under ncu."""
    import torch

    from kernelbench_harness.execution.build import BuildRecord, install_build_hooks
    from kernelbench_harness.execution.timing import TimerSettings, time_callable
    from kernelbench_harness.protocols import get_protocol

    install_build_hooks(workdir / "build", REPO / "results" / "build_cache", BuildRecord())
    ref = _load(workdir / "problem.py", "kb_problem")
    cand = _load(workdir / "candidate.py", "kb_candidate")
    dev = torch.device("cuda")
    torch.manual_seed(0)
    init = ref.get_init_inputs()
    model = cand.ModelNew(*init).to(dev).eval()
    torch.manual_seed(1)
    inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in ref.get_inputs()]
    with torch.no_grad():
        if mode == "time":
            settings = TimerSettings.from_protocol(get_protocol("kbench"), dev)
            stats, info = time_callable(lambda i: model(*inputs), dev, settings)
            print("KBTIME " + json.dumps({"median_ms": stats.median_ms, "mean_ms": stats.mean_ms,
                                          "ci95_ms": [stats.ci95_low_ms, stats.ci95_high_ms], "n": stats.n,
                                          "stopped": info.get("stopped")}))
        else:
            for _ in range(3):
                model(*inputs)
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
            for _ in range(iters):
                model(*inputs)
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()


def parse_ncu_csv(text: str) -> list[tuple[str, float]]:
    """(kernel name, gpu__time_duration.sum in ns) per profiled launch from ``ncu --csv --page raw``."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        return []
    head = rows[0]
    try:
        ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    except ValueError:
        return []
    out = []
    for r in rows[1:]:
        if len(r) <= max(ki, ti) or not r[0].strip().isdigit():
            continue  # the units row
        try:
            out.append((r[ki], float(r[ti].replace(",", ""))))
        except ValueError:
            continue
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, default=None)
    ap.add_argument("--run", default="kernelsseum")
    ap.add_argument("--generations", default=None, help="unused; accepted for a uniform command line")
    ap.add_argument("--problems", default=None, help="unused; the problem source comes from the store")
    ap.add_argument("--out", type=Path, default=Path("ncu.json"))
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--inner", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="time", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner is not None:
        inner(a.inner, a.mode, a.iters)
        return 0
    if a.store is None or not a.store.is_file():
        ap.error(f"--store {a.store}: no such SQLite store (the results DB of the run named by --run)")
    con = sqlite3.connect(f"file:{a.store}?mode=ro", uri=True)
    rows, seen = [], set()
    for pid, model, code, source, cms in con.execute(SQL, (a.run,)):
        if pid in seen:
            continue
        seen.add(pid)
        rows.append((pid, model, code, source, cms))
        if len(rows) == a.n:
            break
    if not rows:
        ap.error(f"run {a.run!r} in {a.store} has no correct level-1 candidate to profile (`kbench runs list`)")
    import asyncio

    import torch

    from kernelbench_harness.core import Backend, Candidate
    from kernelbench_harness.execution.build import target_arch_list
    from kernelbench_harness.execution.builder import BuildPool

    # build every candidate's extensions at once, into kbench's cache, with the arch list the
    # children use (they load from the cache instead of compiling one after the other)
    arch = target_arch_list(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None
    pool = BuildPool(REPO / "results" / "build_cache", workers=max(1, len(rows)), arch_list=arch)

    async def build_all() -> list:
        return await asyncio.gather(*(pool.build(Candidate(1, pid, code, Backend.detect(code)))
                                      for pid, _, code, _, _ in rows))
    try:
        built = asyncio.run(build_all())
    finally:
        pool.close()
    print("builds: " + ", ".join(b.status for b in built), flush=True)
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    result: dict = {"ncu": ncu, "iters": a.iters, "candidates": []}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env["TORCH_CUDA_ARCH_LIST"] = arch or ""
    for pid, model, code, source, cms in rows:
        wd = Path(tempfile.mkdtemp(prefix="kbncu_"))
        (wd / "problem.py").write_text(source)
        (wd / "candidate.py").write_text(code)
        (wd / "build").mkdir()
        rec: dict = {"problem_id": pid, "model": model, "run_candidate_ms": cms}
        me = [sys.executable, str(Path(__file__).resolve()), "--inner", str(wd), "--iters", str(a.iters)]
        p = subprocess.run(me + ["--mode", "time"], capture_output=True, text=True, env=env, timeout=300)
        for ln in p.stdout.splitlines():
            if ln.startswith("KBTIME "):
                rec["kbench"] = json.loads(ln[7:])
        if "kbench" not in rec:
            rec["time_error"] = (p.stdout + p.stderr)[-2000:]
        log = wd / "ncu.csv"
        cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
               "--print-units", "base", "--metrics", "gpu__time_duration.sum", "--log-file", str(log)]
        try:
            p = subprocess.run(cmd + me + ["--mode", "ncu"], capture_output=True, text=True, env=env, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            p = subprocess.CompletedProcess(cmd, -1, "", f"{type(e).__name__}: {e}")
        text = log.read_text() if log.exists() else ""
        launches = parse_ncu_csv(text)
        rec["ncu_rc"] = p.returncode
        if launches:
            total_ns = sum(t for _, t in launches)
            rec["ncu_launches"] = len(launches)
            rec["ncu_kernels"] = sorted({k[:120] for k, _ in launches})
            rec["ncu_ms_per_forward"] = total_ns / a.iters / 1e6
            km = (rec.get("kbench") or {}).get("median_ms")
            if km:
                rec["kbench_over_ncu"] = km / rec["ncu_ms_per_forward"]
        else:
            rec["ncu_error"] = (text + p.stdout + p.stderr)[-3000:]
        result["candidates"].append(rec)
        print(json.dumps({k: v for k, v in rec.items() if k not in ("ncu_error", "time_error")}), flush=True)
        a.out.write_text(json.dumps(result, indent=1))
        shutil.rmtree(wd, ignore_errors=True)
    a.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
