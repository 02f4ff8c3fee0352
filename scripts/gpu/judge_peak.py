"""What a large job's lazy judging holds on the GPU, one copy of the set for both forwards against a copy each
(issue 7, H200 session 17: the trusted side's allocator held 54 GiB judging L1/19's 6 GiB set and output).

For an elementwise problem (``torch.relu``) of ``--gib`` GiB of float32 input and output, judged under
``kbench`` (float64 twin, lazy references), side by side in one process, alternating, ``--repeat`` times:

    one_copy   the set drawn once, upcast beside it, the reference and then the float64 twin (the path large
               jobs took before; smaller jobs still take it)
    two_copies the float64 twin first on a copy of its own, then the reference on a second copy, with the set's
               freed block handed back before the twin's forward (ProblemContext._compare_once)

each on the set as stored (``round=None``) and refreshed for a timed round (``round=3``); and the context's
set-up (``setup kept``: the set-sized blocks its draws and the reference's evaluations leave in the allocator's
cache kept beside the float64 twin's evaluation, as before; ``setup handed_back``: handed back first). Per variant: the
allocator's allocated and reserved high-water marks during the comparison beyond what was held before (GiB,
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``; the candidate's output, allocated before, is
counted in ``held_gib``), the comparison's wall seconds, and whether the two verdicts agree.

    python3 scripts/gpu/judge_peak.py --gib 6 --repeat 3 > judge_peak.json

Prints one JSON object. Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

RELU = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.rand(ROWS, 1 << 20)]
def get_init_inputs():
    return []
"""


def main() -> int:
    import torch

    from kernelbench_harness.execution import device as dev
    from kernelbench_harness.problems import Problem
    from kernelbench_harness.protocols import get_protocol

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=6.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of the script (no memory figures)")
    args = ap.parse_args()
    rows = int(args.gib * (1 << 30) / 4 / (1 << 20))
    if rows < 1 or args.repeat < 1:
        ap.error(f"--gib {args.gib} --repeat {args.repeat}: expected at least 1/256 GiB and one repeat")
    cuda = torch.device(args.device)
    on_gpu = cuda.type == "cuda"

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def stat(name: str) -> int:
        return int(getattr(torch.cuda, name)()) if on_gpu else 0
    gib = float(1 << 30)
    prob = Problem(1, 19, "ReLU_peak", RELU.replace("ROWS", str(rows)))
    ctx = dev.ProblemContext(prob, get_protocol("kbench"), 7, cuda, Path(tempfile.mkdtemp()), ref_budget_bytes=0)
    assert ctx.lazy_refs and ctx.fp64_judge, (ctx.lazy_refs, ctx.fp64_judge)
    out = {"gib": args.gib, "set_gib": ctx.set_nbytes / gib, "out_gib": ctx.out_nbytes / gib, "redraw": ctx.redraw,
           "large": ctx.large, "setup_s": ctx.setup_s, "torch": torch.__version__,
           "device": torch.cuda.get_device_name() if on_gpu else "cpu", "runs": []}
    # the set-up's peak (the allocator's reserved high-water mark, as a job's trusted_device_peak_bytes), with the
    # set-sized blocks handed back before the float64 twin's evaluation and, as before, kept (empty_cache a no-op)
    setups = []
    for rep in range(args.repeat):
        for variant in ("kept", "handed_back"):
            sync()
            dev._device_peak(cuda, reset=True)
            real_empty = torch.cuda.empty_cache
            if variant == "kept":
                torch.cuda.empty_cache = lambda: None
            try:
                t0 = time.perf_counter()
                c2 = dev.ProblemContext(prob, get_protocol("kbench"), 100 + rep, cuda, Path(tempfile.mkdtemp()),
                                        ref_budget_bytes=0)
                wall = time.perf_counter() - t0
            finally:
                torch.cuda.empty_cache = real_empty
            peak = dev._device_peak(cuda) or 0
            setups.append({"rep": rep, "variant": variant, "setup_s": wall, "reserved_peak_gib": peak / gib})
            c2.free()
            del c2
    out["setup"] = setups
    real_large, real_tight = dev.ProblemContext.large, dev.ProblemContext._memory_tight
    try:
        for rep in range(args.repeat):
            for variant in ("one_copy", "two_copies"):
                dev.ProblemContext.large = property(lambda self, v=variant: v == "two_copies")
                # (a device short of memory would send the one-copy variant down the two-copy path too)
                dev.ProblemContext._memory_tight = lambda self: False
                for round_ in (None, 3):
                    sync()
                    x = ctx.set_values(0)[0]
                    if round_ is not None:
                        x = dev._timing.refresh_values(x, round_)
                    outs = [torch.relu(x)]  # the candidate's output, copied out
                    del x
                    sync()
                    if on_gpu:
                        torch.cuda.reset_peak_memory_stats()
                    held_a, held_r = stat("memory_allocated"), stat("memory_reserved")
                    t0 = time.perf_counter()
                    cmp = ctx.compare_on(0, round_, outs)
                    sync()
                    wall = time.perf_counter() - t0
                    out["runs"].append({
                        "rep": rep, "variant": variant, "round": round_, "ok": cmp.ok, "compare_s": wall,
                        "held_gib": held_a / gib,
                        "allocated_peak_gib": (stat("max_memory_allocated") - held_a) / gib,
                        "reserved_peak_gib": (stat("max_memory_reserved") - held_r) / gib,
                        "max_abs_err": cmp.max_abs_err})
                    del outs
    finally:
        dev.ProblemContext.large, dev.ProblemContext._memory_tight = real_large, real_tight
    summary = {}
    for variant in ("one_copy", "two_copies"):
        for round_ in (None, 3):
            rs = [r for r in out["runs"] if r["variant"] == variant and r["round"] == round_]
            summary[f"{variant} round={round_}"] = {
                "ok": all(r["ok"] for r in rs),
                "allocated_peak_gib": max(r["allocated_peak_gib"] for r in rs),
                "reserved_peak_gib": max(r["reserved_peak_gib"] for r in rs),
                "held_gib": rs[0]["held_gib"],
                "compare_s_median": statistics.median(r["compare_s"] for r in rs)}
    for variant in ("kept", "handed_back"):
        rs = [r for r in setups if r["variant"] == variant]
        if rs:
            summary[f"setup {variant}"] = {"reserved_peak_gib": max(r["reserved_peak_gib"] for r in rs),
                                           "setup_s_median": statistics.median(r["setup_s"] for r in rs)}
    out["summary"] = summary
    ctx.free()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
