#!/usr/bin/env python
"""Developer self-check of the bundled suite: every example solution against its reference.

For each bundled problem and each solution variant asked for, builds ``Model`` and ``ModelNew``
in this process (a developer check, not the evaluator: no isolation), copies the state_dict,
runs both on fresh inputs ``--trials`` times and prints the largest errors and wall times.
It also checks that the problem is not degenerate (output not near-constant or tiny, and it
changes with the inputs) and that ``ModelNew`` leaves its inputs untouched.

On ``--device cpu`` (the default) Triton kernels run under the interpreter: ``TRITON_INTERPRET=1``
is set before triton is imported (triton reads it when ``@triton.jit`` is applied).

Usage:
    python scripts/check_bundled.py                         # cpu: triton + cpp
    python scripts/check_bundled.py --variant triton --json -
    python scripts/check_bundled.py --device cuda           # GPU: triton + cuda + cpp

Exit status: 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

_VARIANTS = ("triton", "cuda", "cpp")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--variant", default="default",
                    help="comma-separated subset of triton,cuda,cpp, or 'default' (cpu: triton,cpp; cuda: all)")
    ap.add_argument("--level", type=int, action="append", help="only this level (repeatable)")
    ap.add_argument("--trials", type=int, default=3, help="fresh input sets per solution (default 3)")
    ap.add_argument("--rtol", type=float, default=1e-5,
                    help="allowed max|new - ref| / max|ref| (default 1e-5)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-' for stdout only)")
    return ap.parse_args(argv)


def _import_file(path: Path, module_name: str) -> ModuleType:
    """Import a file as a real module (Triton reads kernel source through ``inspect``, so no exec)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    return mod


def _to(x: Any, device: str) -> Any:
    import torch

    return x.to(device) if isinstance(x, torch.Tensor) else x


def _clone(x: Any) -> Any:
    import torch

    return x.clone() if isinstance(x, torch.Tensor) else x


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _check_problem(problem: Any, mod: ModuleType, device: str, trials: int, seed: int) -> dict[str, Any]:
    """Reference-only checks: runs, int inputs stay int, outputs non-degenerate and input-dependent."""
    import torch

    torch.manual_seed(seed)
    model = mod.Model(*mod.get_init_inputs()).to(device).eval()
    outs = []
    int_inputs = 0
    for _ in range(2):
        inputs = mod.get_inputs()
        assert all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in inputs), \
            "get_inputs() must return CPU tensors"
        int_inputs = sum(1 for t in inputs if not t.is_floating_point())
        with torch.no_grad():
            outs.append(model(*[_to(t, device) for t in inputs]).detach().float().cpu())
    a, b = outs
    return {
        "out_shape": list(a.shape),
        "int_inputs": int_inputs,
        "max_abs_out": float(a.abs().max()),
        "std_out": float(a.std()),
        "changes_with_inputs": bool((a - b).abs().max() > 1e-3 * max(float(a.abs().max()), 1e-12)),
    }


def _check_solution(mod: ModuleType, sol_mod: ModuleType, device: str, trials: int, seed: int) -> dict[str, Any]:
    import torch

    torch.manual_seed(seed)
    init = mod.get_init_inputs()
    model = mod.Model(*init).to(device).eval()
    new = sol_mod.ModelNew(*init).to(device).eval()
    new.load_state_dict(model.state_dict(), strict=True)
    max_abs, max_rel, ref_ms, new_ms = 0.0, 0.0, [], []
    mutated = False
    for t in range(trials):
        torch.manual_seed(seed + 1 + t)
        inputs = [_to(x, device) for x in mod.get_inputs()]
        with torch.no_grad():
            _sync(device)
            t0 = time.perf_counter()
            ref = model(*[_clone(x) for x in inputs])
            _sync(device)
            ref_ms.append((time.perf_counter() - t0) * 1e3)
            given = [_clone(x) for x in inputs]
            t0 = time.perf_counter()
            out = new(*given)
            _sync(device)
            new_ms.append((time.perf_counter() - t0) * 1e3)
        mutated |= any(isinstance(g, torch.Tensor) and not torch.equal(g, x) for g, x in zip(given, inputs))
        if out.shape != ref.shape or out.dtype != ref.dtype:
            raise AssertionError(f"output {tuple(out.shape)} {out.dtype}, reference {tuple(ref.shape)} {ref.dtype}")
        err = float((out.double() - ref.double()).abs().max())
        scale = float(ref.double().abs().max())
        max_abs = max(max_abs, err)
        max_rel = max(max_rel, err / scale if scale > 0 else float("inf"))
    return {"max_abs_err": max_abs, "max_rel_err": max_rel, "inputs_mutated": mutated,
            "ref_ms": ref_ms, "new_ms": new_ms}


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported by any solution
    import torch

    from kernelbench_harness.adapters.bundled import find_bundled_solutions
    from kernelbench_harness.problems import bundled_problems_dir, load_problems

    if args.variant == "default":
        variants = ["triton", "cpp"] if args.device == "cpu" else list(_VARIANTS)
    else:
        variants = [v.strip() for v in args.variant.split(",") if v.strip()]
        bad = [v for v in variants if v not in _VARIANTS]
        if bad:
            print(f"unknown variant(s): {', '.join(bad)}", file=sys.stderr)
            return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda but no CUDA device is visible", file=sys.stderr)
        return 2

    root = bundled_problems_dir()
    suite = load_problems("bundled", levels=args.level)
    solutions = find_bundled_solutions()
    rows: list[dict[str, Any]] = []
    ok = True
    for p in suite.problems:
        path = root / f"level{p.level}" / p.file_name
        row: dict[str, Any] = {"level": p.level, "problem_id": p.problem_id, "name": p.name, "variant": "reference"}
        try:
            mod = _import_file(path, f"_kbench_problem_l{p.level}_{p.problem_id}")
            row.update(_check_problem(p, mod, args.device, args.trials, args.seed))
            degenerate = (row["max_abs_out"] < 1e-4 or row["std_out"] < 1e-3 * row["max_abs_out"]
                          or not row["changes_with_inputs"])
            row["ok"] = not degenerate
            row["error"] = "degenerate outputs" if degenerate else ""
        except Exception as e:  # noqa: BLE001 - a developer script: report and go on
            row.update(ok=False, error=f"{type(e).__name__}: {e}", trace=traceback.format_exc())
            mod = None
        rows.append(row)
        ok &= row["ok"]
        for v in variants:
            sol = solutions.get((p.level, p.problem_id), {}).get(v)
            if sol is None or mod is None:
                continue
            srow: dict[str, Any] = {"level": p.level, "problem_id": p.problem_id, "name": p.name, "variant": v}
            try:
                sol_mod = _import_file(sol.path, f"_kbench_solution_l{p.level}_{p.problem_id}_{v}")
                srow.update(_check_solution(mod, sol_mod, args.device, args.trials, args.seed))
                srow["ok"] = srow["max_rel_err"] <= args.rtol and not srow["inputs_mutated"]
                srow["error"] = "" if srow["ok"] else (
                    "inputs mutated" if srow["inputs_mutated"] else f"max_rel_err > {args.rtol:g}")
            except Exception as e:  # noqa: BLE001
                srow.update(ok=False, error=f"{type(e).__name__}: {e}", trace=traceback.format_exc())
            rows.append(srow)
            ok &= srow["ok"]

    if args.json != "-":
        _print_table(rows, args.device)
    if args.json:
        blob = json.dumps({"device": args.device, "variants": variants, "ok": ok, "rows": rows}, indent=1)
        if args.json == "-":
            print(blob)
        else:
            Path(args.json).write_text(blob, encoding="utf-8")
    return 0 if ok else 1


def _print_table(rows: list[dict[str, Any]], device: str) -> None:
    print(f"bundled suite self-check on {device} (times: wall ms, first call / best)")
    print(f"{'problem':<36} {'variant':<9} {'ok':<4} {'max_abs_err':>11} {'max_rel_err':>11} "
          f"{'ref_ms':>15} {'new_ms':>17}  note")
    for r in rows:
        key = f"L{r['level']}/{r['problem_id']} {r['name']}"[:36]
        if r["variant"] == "reference":
            note = r.get("error") or (f"out {r.get('out_shape')}, max|out| {r.get('max_abs_out', 0):.3g}, "
                                      f"std {r.get('std_out', 0):.3g}, int inputs {r.get('int_inputs', 0)}")
            print(f"{key:<36} {'(ref)':<9} {'yes' if r['ok'] else 'NO':<4} {'':>11} {'':>11} {'':>15} {'':>17}  {note}")
            continue
        if "max_abs_err" in r:
            rt = f"{r['ref_ms'][0]:.3g}/{min(r['ref_ms']):.3g}"
            nt = f"{r['new_ms'][0]:.3g}/{min(r['new_ms']):.3g}"
            print(f"{key:<36} {r['variant']:<9} {'yes' if r['ok'] else 'NO':<4} {r['max_abs_err']:>11.2e} "
                  f"{r['max_rel_err']:>11.2e} {rt:>15} {nt:>17}  {r.get('error', '')}")
        else:
            print(f"{key:<36} {r['variant']:<9} {'NO':<4} {'':>11} {'':>11} {'':>15} {'':>17}  {r['error']}")
            print(r.get("trace", ""))


if __name__ == "__main__":
    sys.exit(main())
