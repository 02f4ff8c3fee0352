"""Fixed costs a fresh candidate process pays on a GPU before and around its kernels (issue 7).

Each candidate runs in its own process forked from a zygote that imported torch, so every candidate
creates a CUDA context, and the launch check starts the CUDA profiler once. This script measures those
steps in fresh processes (``--repeat`` of them), one step after the other, in wall seconds:

    cuda_init_s       torch.cuda.init() and a first one-element allocation (context creation)
    first_kernel_s    first elementwise kernel and a matmul (module load, cuBLAS handle)
    profiler_first_s  first ``torch.autograd.profiler.profile(use_device="cuda", use_kineto=True)`` around
                      one matmul (CUPTI start), as the launch check runs it
    profiler_again_s  the same a second time in the same process
    profiler_wrapper_after_s  ``torch.profiler.profile(activities=[CUDA])`` after that: the wrapper's
                      own start-up (it imports torch._inductor)
    precision_watch_s one call under kbench's precision watch (TorchDispatchMode over every op)

Prints one JSON object a line per process and the medians. Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, time
t = time.perf_counter
import torch
res = {}
a = t(); torch.cuda.init(); x = torch.empty(1, device="cuda"); torch.cuda.synchronize(); res["cuda_init_s"] = t() - a
a = t(); y = torch.randn(1024, 1024, device="cuda"); z = y @ y; torch.cuda.synchronize(); res["first_kernel_s"] = t() - a
for key in ("profiler_first_s", "profiler_again_s"):  # what profile_kernels uses (no inductor import)
    a = t()
    with torch.autograd.profiler.profile(use_cpu=False, use_device="cuda", use_kineto=True) as prof:
        z = y @ y; torch.cuda.synchronize()
    n = sum(1 for ev in prof.function_events if ev.device_type == torch.autograd.DeviceType.CUDA)
    res[key] = t() - a
    res["profiled_cuda_kernels"] = n
from torch.profiler import ProfilerActivity, profile
a = t()
with profile(activities=[ProfilerActivity.CUDA]) as prof:  # the wrapper: imports torch._inductor first
    z = y @ y; torch.cuda.synchronize()
n = sum(1 for ev in prof.events())
res["profiler_wrapper_after_s"] = t() - a
try:
    from kernelbench_harness.execution.guards import run_watching_precision
    a = t(); run_watching_precision(lambda: y @ y); torch.cuda.synchronize(); res["precision_watch_s"] = t() - a
except Exception as e:
    res["precision_watch_error"] = repr(e)
print(json.dumps(res))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for _ in range(args.repeat):
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
        line = (out.stdout.strip().splitlines() or [""])[-1]
        try:
            rows.append(json.loads(line))
            print(line, flush=True)
        except json.JSONDecodeError:
            print("child failed:", out.stderr[-2000:], flush=True)
    keys = sorted({k for r in rows for k, v in r.items() if isinstance(v, float)})
    print(json.dumps({"median": {k: round(statistics.median(r[k] for r in rows if k in r), 3) for k in keys}}))


if __name__ == "__main__":
    main()
