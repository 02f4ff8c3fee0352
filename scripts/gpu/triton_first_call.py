"""Where a fresh candidate process's first Triton call goes (issue 7): the sweep's first trial call of
each candidate took 1.0-1.5 s, and it holds the device's lock shared, so timing windows wait for it.

Each child is a fresh ``python3`` with its own ``TRITON_CACHE_DIR``, as kbench gives every candidate
process (``worker.py``). Steps, in wall seconds, one after the other in the child:

    import_s        ``import torch, triton`` and CUDA context creation (one allocation)
    utils_s         ``triton.runtime.driver.active.utils``: Triton's ``cuda_utils`` module (built with the
                    host C compiler into the cache on a miss)
    first_call_s    the first call of a one-line copy kernel (JIT compile, launcher, module load)
    second_call_s   the same kernel again (the launch alone)

Cache states, one process each per ``--repeat``:

    fresh           an empty cache (what every candidate process has today)
    seeded_utils    an empty cache but for the ``cuda_utils`` entry copied from a finished process's cache
    seeded_all      a finished process's whole cache copied in (what is left is not compilation)

Prints one JSON object a line per process, the medians per state, and which cache entries Triton wrote
(a per-kernel ``__triton_launcher`` entry means the launcher is compiled for each signature).
Needs torch with CUDA and triton.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, time
t = time.perf_counter
res = {}
a = t()
import torch, triton, triton.language as tl
x = torch.empty(1, device="cuda"); torch.cuda.synchronize()
res["import_s"] = t() - a
a = t(); triton.runtime.driver.active.utils; res["utils_s"] = t() - a

@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)

s = torch.randn(1 << 20, device="cuda"); d = torch.empty_like(s); torch.cuda.synchronize()
for key in ("first_call_s", "second_call_s"):
    a = t(); _copy[(triton.cdiv(s.numel(), 1024),)](s, d, s.numel(), BLOCK=1024); torch.cuda.synchronize()
    res[key] = t() - a
assert torch.equal(s, d)
res["triton"] = triton.__version__
print(json.dumps(res))
"""


def run_child(cache: Path) -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache))
    script = cache.parent / "child.py"  # @triton.jit reads its function's source from a file
    if not script.exists():
        script.write_text(CHILD)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kb-triton-probe-"))
    done = root / "done"
    by_state: dict[str, list[dict]] = {"fresh": [], "seeded_utils": [], "seeded_all": []}
    for i in range(a.repeat):
        for state in by_state:
            cache = root / f"{state}-{i}"
            if state == "seeded_all" and done.exists():
                shutil.copytree(done, cache)
            elif state == "seeded_utils" and done.exists():
                cache.mkdir()
                for entry in done.iterdir():
                    if any(f.name.startswith("cuda_utils") for f in entry.iterdir()):
                        shutil.copytree(entry, cache / entry.name)
            else:
                cache.mkdir(exist_ok=True)
            res = run_child(cache)
            res["state"] = state
            print(json.dumps(res), flush=True)
            by_state[state].append(res)
            if state == "fresh" and not done.exists() and "error" not in res:
                shutil.copytree(cache, done)
    if done.exists():
        entries = sorted(f"{e.name[:12]}/{f.name}" for e in done.iterdir() for f in e.iterdir())
        print(json.dumps({"cache_entries": entries}))
    for state, rows in by_state.items():
        ok = [r for r in rows if "error" not in r]
        med = {k: round(statistics.median(r[k] for r in ok), 4) for k in ("import_s", "utils_s", "first_call_s",
                                                                           "second_call_s")} if ok else {}
        print(json.dumps({"median": state, "n": len(ok), **med}))
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
