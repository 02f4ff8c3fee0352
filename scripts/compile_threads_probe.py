"""Seconds of torch.compile's compile and first call of one KernelBench reference in this process, on the CPU,
shrunk inputs allowed. Run it once per setting, each with a fresh cache, e.g.::

    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) TORCHINDUCTOR_COMPILE_THREADS=1 \\
        python scripts/compile_threads_probe.py ../shared/kernelbench/level3/16_DenseNet201.py --shape 1,3,64,64

(then the same with 2 threads, and again with the second run's cache to see a warm one).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem")
    ap.add_argument("--shape", default=None, help="one input's shape instead of get_inputs() (e.g. 1,3,64,64)")
    a = ap.parse_args()
    if not os.path.isfile(a.problem):
        ap.error(f"no such problem file: {a.problem} (a KernelBench problem, e.g. level3/16_DenseNet201.py)")
    try:
        shape = [int(x) for x in a.shape.split(",")] if a.shape else None
    except ValueError:
        ap.error(f"--shape {a.shape!r}: give sizes separated by commas, e.g. 1,3,64,64")
    import torch

    spec = importlib.util.spec_from_file_location("probe_problem", a.problem)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.Model(*mod.get_init_inputs()).eval()
    args = [torch.rand(*shape)] if shape else list(mod.get_inputs())
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.compile(model)(*args)
    print(f"compile and first call: {time.perf_counter() - t0:.1f} s "
          f"(TORCHINDUCTOR_COMPILE_THREADS={os.environ.get('TORCHINDUCTOR_COMPILE_THREADS', 'unset')})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
