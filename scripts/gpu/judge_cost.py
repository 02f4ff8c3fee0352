"""What one judging of a large level-1 output costs on the GPU (issue 7): in the cached sweep of session 14
a large level-1 job's comparisons took 0.3-0.8 s each (``compare``, eight per job), on the sweep's
critical path, since the large jobs run about one at a time.

For an output of ``--gib`` GiB (float32), in wall seconds after a device synchronisation, median of
``--repeat``:

    randn_s        drawing a set of that size on the device (the trusted side draws sets again)
    upcast_s       its float64 upcast
    compare_s      kbench's fp64-bound comparison (verify.compare_outputs) of an output against the
                   reference and its float64 twin, all on the device, with the fused passes
                   (execution/fusedjudge.py; the first call includes compiling them)
    compare_torch_s the same with the PyTorch passes (the fused ones switched off), side by side; the
                   two Comparisons must be equal (``same``)
    allclose_s     the KernelBench-style allclose recorded beside (verify._allclose: torch.allclose) alone,
                   a part of compare_s
    alloc_free_s   allocating what one judging holds (the set, the reference's and the candidate's
                   outputs, the float64 set and output: 7x the set's bytes), freeing it and handing the
                   cache back (torch.cuda.empty_cache), as a large job does after each comparison
    alloc_cached_s the same allocations served from the allocator's cache (no empty_cache before)

Prints one JSON object. Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import torch

    import dataclasses

    from kernelbench_harness.execution import verify
    from kernelbench_harness.execution.verify import compare_outputs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=6.0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    dev = torch.device("cuda")
    n = int(a.gib * (1 << 30)) // 4
    sync = torch.cuda.synchronize
    res: dict[str, list[float]] = {k: [] for k in ("randn_s", "upcast_s", "compare_s", "compare_torch_s",
                                                   "allclose_s", "alloc_free_s", "alloc_cached_s")}
    same: list[bool] = []

    def timed(key: str, fn) -> object:
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        res[key].append(time.perf_counter() - t0)
        return out

    for _ in range(a.repeat):
        g = torch.Generator(device=dev).manual_seed(1)
        x = timed("randn_s", lambda: torch.randn(n, device=dev, generator=g))
        ref64 = timed("upcast_s", lambda: x.double())
        out = x + 1e-7 * torch.randn_like(x)
        cmp = timed("compare_s", lambda: compare_outputs([out], [x], judge="fp64-bound", atol=1e-4, rtol=1e-4,
                                                         refs64=[ref64]))
        assert cmp.ok, cmp
        timed("allclose_s", lambda: verify._allclose(out, x, 1e-4, 1e-4))
        usable = verify._fused_usable
        verify._fused_usable = lambda *_a: False
        try:
            cmp_t = timed("compare_torch_s", lambda: compare_outputs([out], [x], judge="fp64-bound", atol=1e-4,
                                                                     rtol=1e-4, refs64=[ref64]))
        finally:
            verify._fused_usable = usable
        same.append(dataclasses.asdict(cmp) == dataclasses.asdict(cmp_t))
        out[:: 1 << 20] += 1e-2  # a wrong output: the two passes must agree on what fails too
        bad = compare_outputs([out], [x], judge="fp64-bound", atol=1e-4, rtol=1e-4, refs64=[ref64])
        verify._fused_usable = lambda *_a: False
        try:
            bad_t = compare_outputs([out], [x], judge="fp64-bound", atol=1e-4, rtol=1e-4, refs64=[ref64])
        finally:
            verify._fused_usable = usable
        same.append(dataclasses.asdict(bad) == dataclasses.asdict(bad_t) and not bad.ok)
        x = ref64 = out = None  # freed before the allocation cycles
        torch.cuda.empty_cache()

        def cycle() -> None:
            held = [torch.empty(n, device=dev) for _ in range(3)] + [torch.empty(n, dtype=torch.float64, device=dev)
                                                                     for _ in range(2)]
            held[0].fill_(0)
            del held

        timed("alloc_free_s", lambda: (cycle(), torch.cuda.empty_cache()))
        cycle()  # leaves the blocks in the cache
        timed("alloc_cached_s", cycle)
        torch.cuda.empty_cache()
    # the fused passes ran (a kernel that fails falls back to the PyTorch passes, which agree trivially)
    print(json.dumps({"gib": a.gib, "device": torch.cuda.get_device_name(dev), "same": all(same),
                      "fused_ran": not verify._FUSED_OFF,
                      **{k: round(statistics.median(v), 4) for k, v in res.items()},
                      "all": {k: [round(x, 4) for x in v] for k, v in res.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
