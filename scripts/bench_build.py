"""Where the compile time of a ``load_inline`` CUDA extension goes, and what the slim-header build saves.

For each candidate, builds its extension twice in fresh folders, exactly as torch's JIT does
(ninja, nvcc, the host compiler; one translation unit at a time), once as written and once with
``-DTORCH_INDUCTOR_CPP_WRAPPER`` (which makes ``<torch/extension.h>`` skip ``<torch/all.h>``, the C++
frontend; nothing else in torch's headers reads that macro). ``--phases`` adds nvcc's ``--time``
phase report of the CUDA file. Needs a CUDA build of torch and nvcc; no GPU (set TORCH_CUDA_ARCH_LIST, e.g. 9.0).

    TORCH_CUDA_ARCH_LIST=9.0 python scripts/bench_build.py --generations ../shared/kernelsseum-v0/generations.jsonl -n 3

Prints one JSON line per candidate: build seconds full and slim (and with ``--phases`` the binding's
compile time and the nvcc phase split). ``--pch`` times the slim binding file ``main.cpp`` again
with and without kbench's precompiled ``torch/extension.h`` (built once per flag set, its cost
printed), as CPU seconds of the compiler, and checks that the two object files are identical.
``--variants slim`` skips the as-written build.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


def _ninja_commands(build_dir: Path) -> dict[str, str]:
    """The compile commands of a torch JIT build folder (rule expansions of build.ninja)."""
    text = (build_dir / "build.ninja").read_text()
    var = dict(re.findall(r"^(\w+) = (.*)$", text, flags=re.M))
    out = {}
    for m in re.finditer(r"^build (\S+): (\w+) (\S+)", text, flags=re.M):
        obj, rule, src = m.groups()
        if rule == "compile":
            out["main.cpp"] = f"{var.get('cxx', 'c++')} -MMD -MF {obj}.d {var['cflags']} -c {src} -o {obj} {var.get('post_cflags', '')}"
        elif rule == "cuda_compile":
            out["cuda.cu"] = (f"{var.get('nvcc', 'nvcc')} {var['cuda_cflags']} -c {src} -o {obj} "
                              f"{var.get('cuda_post_cflags', '')}")
    return out


def _time(cmd: str, cwd: Path, extra: str = "") -> float:
    t0 = time.perf_counter()
    p = subprocess.run(f"{cmd} {extra}", shell=True, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        return float("nan")
    return time.perf_counter() - t0


def _cpu(cmd: str, cwd: Path, extra: str = "") -> float:
    """CPU seconds (user + system) of a shell command's children; NaN when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(f"{cmd} {extra}", shell=True, cwd=cwd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        return float("nan")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _pch_figures(kw: dict, build_dir: Path, pch_cache: Path) -> dict:
    """main.cpp of a slim build folder compiled with and without the precompiled header."""
    from kernelbench_harness.execution.build import SLIM_MACRO, _pch_request, build_pch

    sb = dict(kw, extra_cflags=list(kw.get("extra_cflags") or []) + [SLIM_MACRO])
    req = _pch_request(sb)
    cmds = _ninja_commands(build_dir)
    if req is None or "main.cpp" not in cmds:
        return {"pch": "unavailable"}
    row: dict = {}
    request = {"key": req[0], "with_cuda": bool(kw.get("cuda_sources")),
               "extra_cflags": list(kw.get("extra_cflags") or []), "extra_include_paths": []}
    if not (pch_cache / "pch" / req[0]).is_dir():
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        ok = build_pch(pch_cache, request) is not None
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        row["pch_build_cpu_s"] = round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1)
        if not ok:
            return {**row, "pch": "refused or failed"}
    cmd = cmds["main.cpp"].replace(" -o main.o", " -o OUT_FILE")
    row["main_cpu_s"] = round(_cpu(cmd.replace("OUT_FILE", "nopch.o"), build_dir), 1)
    row["main_pch_cpu_s"] = round(_cpu(cmd.replace("OUT_FILE", "pch.o"), build_dir,
                                       f"-I{pch_cache / 'pch' / req[0]} -Winvalid-pch"), 1)
    a, b = build_dir / "nopch.o", build_dir / "pch.o"
    row["objects_identical"] = a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generations", required=True)
    ap.add_argument("-n", type=int, default=3, help="candidates to measure")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--variants", default="full,slim", help="builds to time: full (as written), slim")
    ap.add_argument("--pch", action="store_true",
                    help="time the slim main.cpp with and without the precompiled torch/extension.h")
    ap.add_argument("--phases", action="store_true",
                    help="also time main.cpp alone and the nvcc phases of the full CUDA file (compiles again)")
    a = ap.parse_args()
    import torch.utils.cpp_extension as ce

    if ce.CUDA_HOME is None and os.environ.get("CUDA_HOME"):
        # a CPU build of torch with a CUDA toolkit beside it: everything compiles, the link of the
        # CUDA libraries fails (compile figures only; build_s then ends at the failed link)
        ce.CUDA_HOME = os.environ["CUDA_HOME"]
    rows = [json.loads(line) for line in Path(a.generations).read_text().splitlines() if line.strip()]
    results = []
    variants = {v.strip() for v in a.variants.split(",")}
    pch_cache = Path(tempfile.mkdtemp(prefix="kbbench_pch_"))
    for r in rows[: a.n]:
        captured: list[dict] = []
        orig = ce.load_inline

        def grab(*args, **kw):  # record the call, build nothing
            captured.append(dict(kw, **dict(zip(["name", "cpp_sources", "cuda_sources"], args))))
            raise RuntimeError("captured")

        ce.load_inline = grab
        try:
            exec(compile(r["code"], "candidate", "exec"), {"__name__": "kb_bench"})
        except Exception:
            pass
        finally:
            ce.load_inline = orig
        if not captured or not captured[0].get("cuda_sources"):
            continue
        kw = captured[0]
        row = {"level": r["level"], "problem_id": r["problem_id"], "model": r["model"]}
        for variant, flag in (("full", []), ("slim", ["-DTORCH_INDUCTOR_CPP_WRAPPER"])):
            if variant not in variants:
                continue
            d = Path(tempfile.mkdtemp(prefix=f"kbbuild_{variant}_"))
            k = dict(kw, name=f"bench_{variant}", build_directory=str(d), verbose=False)
            k["extra_cflags"] = list(k.get("extra_cflags") or []) + flag
            k["extra_cuda_cflags"] = list(k.get("extra_cuda_cflags") or []) + flag
            os.environ["MAX_JOBS"] = "1"  # one translation unit at a time: the sum is the CPU cost
            t0 = time.perf_counter()
            try:
                orig(**k)
                ok = True
            except Exception:
                ok = False
            row[f"{variant}_s"] = round(time.perf_counter() - t0, 1)
            row[f"{variant}_ok"] = ok
            if a.phases and variant == "full":
                cmds = _ninja_commands(d)
                if "cuda.cu" in cmds:
                    phases = d / "phases.csv"
                    _time(cmds["cuda.cu"], d, f"--time {phases}")
                    if phases.exists():
                        for line in list(csv.reader(phases.open()))[1:]:
                            try:
                                row[f"nvcc:{line[1].strip()}"] = round(float(line[4]) / 1000, 1)
                            except (IndexError, ValueError):
                                continue
                if "main.cpp" in cmds:
                    row["main.cpp_s"] = round(_time(cmds["main.cpp"], d), 1)
            if a.pch and variant == "slim":
                row.update(_pch_figures(kw, d, pch_cache))
            shutil.rmtree(d, ignore_errors=True)
        results.append(row)
        print(json.dumps(row), flush=True)
    shutil.rmtree(pch_cache, ignore_errors=True)
    if a.csv and results:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=sorted({k for r in results for k in r}))
            w.writeheader()
            w.writerows(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
