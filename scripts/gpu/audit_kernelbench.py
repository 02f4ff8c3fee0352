#!/usr/bin/env python3
"""Problem audit of a KernelBench folder on one CUDA GPU, inside a time budget.

Runs :func:`kernelbench_harness.audit.audit_problems` on levels 1-3 at their real sizes (which a
CPU cannot hold: KernelBench main's L1/23, 37, 39 and 53 take 6-9 GB of input each) and measures
eager times, so ``launch-bound`` (eager time under 20 us: the speedup then measures launch overhead,
PROTOCOLS.md section 6) is flagged here and only here.

Order: the problems of PROTOCOLS.md section 5's known defects first (``--first``; they are among the
largest), then every other problem smallest first (sizes estimated on the ``meta`` device, nothing
allocated), so the largest come last. One worker process audits them one after another; a problem
that crashes it, runs out of memory or passes its time limit is recorded and a fresh worker goes on.
The whole run ends within ``--budget`` seconds counted from this script's start: what the budget
does not reach is recorded as ``skipped-time`` (reason ``budget``), and the JSON is always written.

Usage (repository root; needs only torch, numpy and this package)::

    python3 scripts/gpu/audit_kernelbench.py PATH/TO/kernelbench --budget 240 --out $OUT/audit_gpu.json

``PATH/TO/kernelbench`` holds ``level1/``..``level3/`` (KernelBench's ``KernelBench/`` folder, or
``../shared/kernelbench``). Store the flags on a run later, where the store lives, with
``kbench problems audit --load audit_gpu.json --run RUN_NAME``. Prints flag counts, the flagged
problems and the status of each known defect; exit status 0 when the JSON was written.
"""

from __future__ import annotations

import time

_T0 = time.monotonic()

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _levels(spec: str) -> list[int]:
    out: set[int] = set()
    for part in spec.split(","):
        a, _, b = part.strip().partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problems", help="KernelBench folder holding level1/ .. level3/")
    ap.add_argument("--levels", default="1-3", help="levels to audit (default 1-3)")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for the whole run, from start (240)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per problem (30)")
    ap.add_argument("--seeds", type=int, default=3, help="input sets per problem (3)")
    ap.add_argument("--launch-bound-us", type=float, default=20.0, help="launch-bound threshold, us (20)")
    ap.add_argument("--max-elements", type=float, default=None,
                    help="skip problems larger than this many input + weight elements (default: no limit)")
    ap.add_argument("--first", default="known",
                    help="comma-separated problem keys audited first; 'known' (default): PROTOCOLS.md "
                         "section 5's known defects; 'none': strictly smallest first")
    ap.add_argument("--device", default="cuda", help="cuda or cuda:N (cpu only for a dry run)")
    ap.add_argument("--margin", type=float, default=8.0,
                    help="seconds kept back for stopping the worker and writing the JSON (8)")
    ap.add_argument("--out", default=None, help="JSON output (default: $OUT/audit_gpu.json or ./audit_gpu.json)")
    args = ap.parse_args(argv)

    out = Path(args.out or Path(os.environ.get("OUT", ".")) / "audit_gpu.json")
    out.parent.mkdir(parents=True, exist_ok=True)

    import torch

    from kernelbench_harness.audit import (
        KNOWN_DEFECTS,
        AuditReport,
        audit_problems,
        audit_to_json,
        flag_counts,
        known_defect_status,
    )
    from kernelbench_harness.problems import load_problems

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device is visible: this script audits on a GPU (use --device cpu for a dry run)",
              file=sys.stderr)
        return 2
    ps = load_problems(args.problems, levels=_levels(args.levels))
    problems = list(ps.problems)
    if args.first == "known":
        first = list(dict.fromkeys(d.key for d in KNOWN_DEFECTS))
    elif args.first == "none":
        first = []
    else:
        first = [k.strip() for k in args.first.split(",") if k.strip()]
    print(f"{len(problems)} problems from {ps.source} (levels {args.levels}); first: {', '.join(first) or '-'}",
          flush=True)
    done = [0]
    progress = out.with_suffix(".progress.jsonl")
    progress.write_text("", encoding="utf-8")

    def shown(r: AuditReport) -> None:
        done[0] += 1
        with progress.open("a", encoding="utf-8") as f:
            f.write(json.dumps(r.to_dict()) + "\n")
        eager = "-" if r.eager_ms is None else f"{r.eager_ms * 1e3:.1f} us"
        print(f"[{time.monotonic() - _T0:6.1f} s] {done[0]:3d}/{len(problems)} {r.key:6s} {r.name[:40]:40s} "
              f"{eager:>12s}  {', '.join(map(str, r.flags)) or 'ok'}", flush=True)

    env: dict[str, object] = {}
    budget_s = args.budget - (time.monotonic() - _T0) - args.margin
    reports = audit_problems(problems, device=args.device, seeds=args.seeds,
                             max_elements=int(args.max_elements) if args.max_elements else None,
                             launch_bound_us=args.launch_bound_us, timeout_s=args.timeout, budget_s=budget_s,
                             order="size", first=first, on_report=shown, environment=env)
    settings = {"problems": ps.source, "levels": args.levels, "device": args.device, "seeds": args.seeds,
                "timeout_s": args.timeout, "budget_s": args.budget, "launch_bound_us": args.launch_bound_us,
                "max_elements": args.max_elements, "order": "size", "first": first,
                "protocols": ["kbench", "kernelbench", "cuda-agent"], "inputs": "drawn on the device"}
    env["wall_s"] = round(time.monotonic() - _T0, 1)
    out.write_text(json.dumps(audit_to_json(reports, settings=settings, environment=env), indent=1), encoding="utf-8")

    print(f"\nflags: {json.dumps(flag_counts(reports))}")
    print("known defects (PROTOCOLS.md section 5):")
    for d in known_defect_status(reports):
        print(f"  {d['key']:6s} {d['description']:45s} {d['status']:12s} {', '.join(d['flags'])}")
    lb = sorted((r for r in reports if r.has("launch-bound")), key=lambda r: r.eager_ms or 0.0)
    print(f"launch-bound ({len(lb)}): " + ", ".join(f"{r.key} {r.eager_ms * 1e3:.1f} us" for r in lb if r.eager_ms))
    audited = sum(1 for r in reports if r.audited)
    print(f"audited {audited}/{len(reports)} problems in {env['wall_s']} s on {env.get('device_name', args.device)}; "
          f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
