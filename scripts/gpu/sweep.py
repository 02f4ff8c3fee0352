#!/usr/bin/env python3
"""Issue 7's sweep: every level 1-3 KernelBench problem with one candidate each, timed end to end.

The candidate for each problem is the reference re-expressed as ``ModelNew`` (the problem's ``Model``
renamed, so weights and parameter names are the same) whose output goes through one trivial Triton
copy kernel: an honest candidate with one custom kernel, about 1.0x against eager. Triton kernels
need no build, so the sweep measures the evaluation pipeline itself; but each candidate's process compiles
its Triton kernel on its first call (about 1.2 s on an H200, inside the slot). ``--kernel cuda`` uses one
CUDA copy kernel through ``load_inline`` instead, the same source in every candidate: the build pool
compiles it once (content-addressed cache) and each slot loads the binary, as with real CUDA candidates.

    python3 scripts/gpu/sweep.py --problems .data/kernelbench --out $OUT [--levels 1-3] [--limit N]
        [--budget-s 540] [--phase cold|cached|both]

Runs ``kbench run`` twice into one store: ``sweep-cold`` (no baselines stored: eager and torch.compile
measured, references compiled by the warm-up pool) and ``sweep-cached`` (the same candidates, every
baseline reused). Writes ``sweep.db`` (a consistent copy), the two logs and ``sweep_times.json`` to
``--out``; ``scripts/analyze_sweep.py`` turns the store into the phase split and GPU busy fraction
(no device time needed for that).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

WRAPPER = '''

import triton
import triton.language as tl


@triton.jit
def _kb_copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def _kb_through_kernel(t):
    if isinstance(t, (tuple, list)):
        return type(t)(_kb_through_kernel(x) for x in t)
    if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.dtype == torch.bool:
        return t
    src = t.contiguous()
    dst = torch.empty_like(src)
    n = src.numel()
    _kb_copy[(triton.cdiv(n, 1024),)](src, dst, n, BLOCK=1024)
    return dst.view(t.shape)


class ModelNew(_KbReference):
    def forward(self, *args, **kwargs):
        return _kb_through_kernel(super().forward(*args, **kwargs))
'''


CUDA_WRAPPER = r'''

from torch.utils.cpp_extension import load_inline as _kb_load_inline

_KB_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__global__ void kb_copy16(const int4* __restrict__ src, int4* __restrict__ dst, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

__global__ void kb_copy1(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

torch::Tensor kb_copy(torch::Tensor src) {
    TORCH_CHECK(src.is_cuda(), "kb_copy: a CUDA tensor");
    auto s = src.contiguous();
    auto d = torch::empty_like(s);
    const int64_t nbytes = s.numel() * (int64_t)s.element_size();
    if (nbytes == 0) return d;
    const void* sp = s.data_ptr();
    void* dp = d.data_ptr();
    const int threads = 256;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    if (nbytes % 16 == 0 && (uintptr_t)sp % 16 == 0 && (uintptr_t)dp % 16 == 0) {
        const int64_t n = nbytes / 16;
        const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 1 << 16);
        kb_copy16<<<blocks, threads, 0, stream>>>((const int4*)sp, (int4*)dp, n);
    } else {
        const int blocks = (int)std::min<int64_t>((nbytes + threads - 1) / threads, 1 << 16);
        kb_copy1<<<blocks, threads, 0, stream>>>((const unsigned char*)sp, (unsigned char*)dp, nbytes);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return d;
}
"""

_kb_ext = _kb_load_inline(name="kb_sweep_copy", cpp_sources="torch::Tensor kb_copy(torch::Tensor src);",
                          cuda_sources=_KB_CUDA, functions=["kb_copy"], verbose=False)


def _kb_through_kernel(t):
    if isinstance(t, (tuple, list)):
        return type(t)(_kb_through_kernel(x) for x in t)
    if not isinstance(t, torch.Tensor) or t.numel() == 0 or not t.is_cuda:
        return t
    return _kb_ext.kb_copy(t).view(t.shape)


class ModelNew(_KbReference):
    def forward(self, *args, **kwargs):
        return _kb_through_kernel(super().forward(*args, **kwargs))
'''


def make_candidates(problems_dir: Path, levels: list[int], limit: int | None,
                    ids: set[int] | None = None, kernel: str = "triton", samples: int = 1) -> list[dict]:
    """One replay line per problem and sample (``sample_id`` 0 .. samples-1, the same source each)."""
    rows = []
    for level in levels:
        files = sorted((problems_dir / f"level{level}").glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
        for f in files[:limit]:
            pid = int(f.name.split("_")[0])
            if ids and pid not in ids:
                continue
            code = f.read_text()
            code = re.sub(r"\bModel\b", "_KbReference", code)  # the class, super(Model, self), docstrings
            for sample_id in range(samples):
                rows.append({"level": level, "problem_id": pid, "sample_id": sample_id,
                             "model": "reference-through-cuda-copy" if kernel == "cuda" else "reference-through-copy-kernel",
                             "code": code + (CUDA_WRAPPER if kernel == "cuda" else WRAPPER)})
    return rows


def run_name(phase: str, tag: str = "", samples: int = 1) -> str:
    """The store's run name for one phase of a sweep: ``sweep-<phase>[-<tag>][-s<samples>]``. Sweeps with
    different ``--samples`` get different names, so one never resumes (``--resume``) the other's run."""
    return f"sweep-{phase}" + (f"-{tag}" if tag else "") + (f"-s{samples}" if samples > 1 else "")


def has_run(db: Path, run: str) -> bool:
    """Whether the SQLite store ``db`` already holds the run ``run``."""
    if not db.exists():
        return False
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("select 1 from runs where run_name = ?", (run,)).fetchone() is not None
    except sqlite3.Error:
        return False
    finally:
        con.close()


def backup(db: Path, dest: Path) -> None:
    src = sqlite3.connect(db)
    dst = sqlite3.connect(dest)
    src.backup(dst)
    dst.close()
    src.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--levels", default="1-3")
    ap.add_argument("--limit", type=int, default=None, help="problems per level (default: all)")
    ap.add_argument("--ids", default=None, help="only these problem ids, comma-separated (e.g. 7,11)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="wall-clock budget for both runs together")
    ap.add_argument("--phase", choices=["cold", "cached", "both"], default="both")
    ap.add_argument("--db", type=Path, default=REPO / "results" / "sweep.db")
    ap.add_argument("--gpus", default=None, help="passed to kbench run (e.g. 0,0: two slots on one GPU)")
    ap.add_argument("--tag", default="", help="run names sweep-<phase>-<tag> (a cold run split by level)")
    ap.add_argument("--kernel", choices=["triton", "cuda"], default="triton",
                    help="the copy kernel: Triton (compiled in each candidate's process, on the slot's critical "
                         "path) or CUDA through load_inline (built once by the build pool: one source for all)")
    ap.add_argument("--only-correct-in", default=None, metavar="RUN[,RUN...]",
                    help="only the problems with a correct result in one of these runs of --db (a cached run over "
                         "what the cold runs finished, across levels)")
    ap.add_argument("--samples", type=int, default=1,
                    help="candidates per problem (sample_id 0..N-1, the same source each: a model comparison's "
                         "several samples, where a problem's reference set-up and baselines are shared)")
    ap.add_argument("-P", "--protocol-option", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to kbench run as -P KEY=VALUE (e.g. weights_device=cpu for a control run)")
    a = ap.parse_args()
    if a.samples < 1:
        ap.error("--samples must be at least 1")
    lo, _, hi = a.levels.partition("-")
    levels = list(range(int(lo), int(hi or lo) + 1))
    a.out.mkdir(parents=True, exist_ok=True)
    a.db.parent.mkdir(parents=True, exist_ok=True)
    cands = REPO / "results" / "sweep_candidates.jsonl"
    rows = make_candidates(a.problems, levels, a.limit, {int(x) for x in a.ids.split(",")} if a.ids else None,
                           kernel=a.kernel, samples=a.samples)
    if a.only_correct_in:
        con = sqlite3.connect(f"file:{a.db}?mode=ro", uri=True)
        names = [n.strip() for n in a.only_correct_in.split(",") if n.strip()]
        done = set(con.execute(
            "select s.level, s.problem_id from samples s join runs r on r.id = s.run_id join attempts t on "
            "t.sample_pk = s.id join results x on x.attempt_pk = t.id where (x.outcome = 'correct' or (x.outcome = "
            # the sweep's candidates are the reference beside one copy kernel: a large problem's is torch-work
            "'policy' and x.tag = 'torch-work')) and r.run_name in "
            f"({','.join('?' * len(names))})", names).fetchall())
        con.close()
        rows = [r for r in rows if (r["level"], r["problem_id"]) in done]
    cands.write_text("".join(json.dumps(r) + "\n" for r in rows))
    times: dict[str, float] = {"candidates": len(rows)}
    t_start = time.monotonic()
    phases = ["cold", "cached"] if a.phase == "both" else [a.phase]
    try:
        for ph in phases:
            run = run_name(ph, a.tag, a.samples)
            left = a.budget_s - (time.monotonic() - t_start)
            if left < 30:
                break
            cmd = [sys.executable, "-m", "kernelbench_harness", "run", "--model", f"replay:{cands}",
                   "--problems", str(a.problems), "--level", a.levels, "--run-name", run,
                   "--db", str(a.db), "--display", "plain", "--no-report"]
            if a.gpus:
                cmd += ["--gpus", a.gpus]
            for opt in a.protocol_option:
                cmd += ["-P", opt]
            if a.ids:
                cmd += ["--ids", a.ids]
            elif a.limit:
                cmd += ["--ids", f"1-{a.limit}"]
            if has_run(a.db, run):
                cmd.append("--resume")  # cut by an earlier call's budget: continue where it stopped
            t0 = time.monotonic()
            with open(a.out / f"{run}.log", "w") as log:
                p = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    rc = p.wait(timeout=left)
                except subprocess.TimeoutExpired:
                    # out of budget: stop the run and its workers (SIGINT, as Ctrl-C: the store marks the run interrupted; then SIGKILL); the next call resumes
                    times["timed_out"] = True
                    for sig, grace in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
                        try:
                            os.killpg(p.pid, sig)
                            rc = p.wait(timeout=grace)
                            break
                        except ProcessLookupError:
                            rc = p.wait()  # it ended meanwhile
                            break
                        except subprocess.TimeoutExpired:
                            rc = None
            times[f"{ph}_wall_s"] = round(time.monotonic() - t0, 1)
            times[f"{ph}_rc"] = rc
            print(f"{ph}: {times[f'{ph}_wall_s']} s (rc {rc})", flush=True)
            if times.get("timed_out"):
                break
    finally:
        (a.out / "sweep_times.json").write_text(json.dumps(times, indent=2))
        if a.db.exists():
            backup(a.db, a.out / "sweep.db")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
