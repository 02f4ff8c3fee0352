#!/usr/bin/env python3
"""Is a short kernel's per-process time level set on the host (launch) or on the GPU? (issue 3)

    python3 scripts/gpu/launch_bound.py --problems .data/kernelsseum-v0/problems --out $OUT/launch.json \
        [--ids 1,3,4,5,12] [--procs 6] [--rounds 2] [--variants free,hashseed,noaslr,fixed] [--compile] \
        [--noaslr-via auto|setarch|personality] [--budget-s 540]

Session 7 showed that the placements of a problem's inputs inside one process agree (median spread
<1%), while two processes (two runs) sit on levels 10-30% apart for sub-3 ms eager and torch.compile
baselines. This script starts ``--procs`` fresh processes per variant, one after the other; each loads
the level-1 problems ``--ids`` and times ``Model(*inputs)`` on the GPU these ways, interleaved, in
``--rounds`` rounds:

- ``single``: the kbench timer (an L2 flush, then one call between a CUDA event pair; 100 ms of
  warm-up, at least 0.25 s of trials), as every baseline and candidate is timed;
- ``single_noflush``: the same without the L2 flush;
- ``hidden``: ``single`` with launch hiding (``TimerSettings.hide_launch``: a GPU spin before the start
  event, so the call's kernels are queued when it fires);
- ``b2b``: 20 calls back to back between one event pair, per call (the GPU queue stays full, so the
  host's launch time is hidden when it is shorter than the kernels);
- ``host``: the host's time for one call without synchronising (launch cost), median of 200.

With ``--compile``, after all eager rows each process compiles every problem with ``torch.compile``
(default mode; 5 warm-up calls, ``compile_warmup_s``) and times it as ``compile_hidden`` (the
``hidden`` settings) and ``compile_host`` (as ``host``). It costs the compiles' time.

Each process records the CPU it ran on. If ``single`` moves between processes and ``b2b`` does not, the
levels come from the host side (launch latency inside the timed region), not from the GPU's memory.

Host-bound levels differ 20-100% between fresh processes (session 15), pinned to one CPU or not.
``--variants`` tests whether the process's start-up randomisation sets them; each variant's processes
are started with:

- ``free``: the parent's environment without ``PYTHONHASHSEED`` (string hashes and ASLR random);
- ``hashseed``: ``PYTHONHASHSEED=0``;
- ``noaslr``: address-space layout randomisation off for that process only: ``setarch $(uname -m) -R``
  when ``setarch`` exists, else ``personality(ADDR_NO_RANDOMIZE)`` in a ``preexec_fn``
  (``--noaslr-via``). A probe child checks the mechanism first; if no mechanism sets the bit, the
  ``noaslr`` and ``fixed`` variants are skipped (``skipped`` in the output);
- ``fixed``: both.

The variants' processes are interleaved round-robin (free 1, hashseed 1, noaslr 1, fixed 1, free 2, ...),
so slow drift of the machine does not land on one variant. Every child records ``startup``: its
``/proc/self/personality``, ``aslr_off`` (the ADDR_NO_RANDOMIZE bit 0x0040000), ``PYTHONHASHSEED``,
``hash("abc")`` and two addresses (``id(None)``, a fresh object's), which repeat between processes
only without ASLR. ``--budget-s`` starts no new round-robin cycle that would end after that many
seconds (by the longest cycle so far); the output file is rewritten after every process.

Output (changed with ``--variants``; before, the top level was one variant's ``summary`` and
``processes``): ``variants.<name>`` holds exactly that earlier output for each variant; ``spread_pct``
(also printed) holds per variant, problem and row (``host``, ``hidden``, ``compile_hidden``,
``compile_host``) the process-to-process spread, (max - min) / median of the per-process medians, in
percent; further ``args``, ``order`` (variant of each process as started), ``noaslr_via``,
``randomize_va_space``, ``skipped``, ``failures`` and ``stopped_early``.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing_drift import load_eager, spread  # noqa: E402  (one copy of the problem loading and the spread)

SELF = str(Path(__file__).resolve())  # the script each child runs
VARIANTS = ("free", "hashseed", "noaslr", "fixed")
WAYS = ("single", "single_noflush", "hidden", "b2b", "host")
COMPILE_WAYS = ("compile_hidden", "compile_host")
SPREAD_ROWS = ("host", "hidden") + COMPILE_WAYS
ADDR_NO_RANDOMIZE = 0x0040000


def startup_record() -> dict:
    """How this process was started: personality, ASLR, string-hash seed, two addresses."""
    try:
        persona = int(Path("/proc/self/personality").read_text().strip(), 16)
    except (OSError, ValueError):
        persona = -1
    return {"personality": f"{persona:08x}" if persona >= 0 else None,
            "aslr_off": persona >= 0 and bool(persona & ADDR_NO_RANDOMIZE),
            "pythonhashseed": os.environ.get("PYTHONHASHSEED"), "hash_abc": hash("abc"),
            "addr_none": hex(id(None)), "addr_object": hex(id(object()))}


def _host_ms(fn, dev, torch) -> float:
    """The host's time for one call without synchronising, median of 200 (ms)."""
    hs = []
    for i in range(200):
        torch.cuda.synchronize(dev)
        h0 = time.perf_counter_ns()
        fn(i)
        hs.append((time.perf_counter_ns() - h0) / 1e6)
    torch.cuda.synchronize(dev)
    return statistics.median(hs)


def child(problems: Path, ids: list[int], rounds: int, compile_: bool = False) -> dict:
    started = startup_record()
    import torch

    from kernelbench_harness.execution import timing as T

    dev = torch.device("cuda:0")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    flush = T.l2_flush_bytes_for(dev, "device", 256 * 1024 * 1024)
    single = T.TimerSettings(timer="cuda_events", warmup=5, trials=20, adaptive=True, max_trials=2000,
                             target_ci_rel=0.01, time_budget_s=4.0, warmup_ms=100.0, min_time_s=0.25,
                             l2_flush_bytes=flush)
    noflush = dataclasses.replace(single, l2_flush_bytes=0)
    hidden = dataclasses.replace(single, hide_launch=True)
    out: dict = {"startup": started, "cpu_start": _cpu(), "affinity": sorted(os.sched_getaffinity(0)), "problems": {}}
    for pid in ids:
        _path, _mod, model, sets, fn = load_eager(problems, pid, dev)

        rows: dict[str, list[float]] = {"single": [], "single_noflush": [], "hidden": [], "b2b": [], "host": []}
        exposed = []
        for _ in range(rounds):
            time.sleep(0.2)
            rows["single"].append(T.time_callable(fn, dev, single)[0].median_ms)
            rows["single_noflush"].append(T.time_callable(fn, dev, noflush)[0].median_ms)
            st, inf = T.time_callable(fn, dev, hidden)
            rows["hidden"].append(st.median_ms)
            exposed.append([inf.get("launch_exposed"), inf.get("launch_hidden_trials"), inf.get("launch_sleep_ms")])
            per = []
            for r in range(15):
                torch.cuda.synchronize(dev)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for i in range(20):
                    fn(i)
                b.record()
                torch.cuda.synchronize(dev)
                per.append(a.elapsed_time(b) / 20)
            rows["b2b"].append(statistics.median(per))
            rows["host"].append(_host_ms(fn, dev, torch))
        out["problems"][str(pid)] = {k: [round(v, 6) for v in vs] for k, vs in rows.items()}
        out["problems"][str(pid)]["hidden_exposed_trials_sleep_ms"] = exposed
        del model, sets
        torch.cuda.empty_cache()
    # torch.compile after every eager row, so the eager rows see the same process as without --compile
    for pid in ids if compile_ else ():
        _path, _mod, model, sets, _fn = load_eager(problems, pid, dev)
        t0 = time.perf_counter()
        compiled = torch.compile(model)

        def cfn(i: int, m=compiled, sets=sets):
            with torch.no_grad():
                return m(*sets[i % 3])

        for i in range(5):
            cfn(i)  # compile and warm up outside the timed phases
        torch.cuda.synchronize(dev)
        warm_s = time.perf_counter() - t0
        crows: dict[str, list[float]] = {"compile_hidden": [], "compile_host": []}
        exposed = []
        for _ in range(rounds):
            time.sleep(0.2)
            st, inf = T.time_callable(cfn, dev, hidden)
            crows["compile_hidden"].append(st.median_ms)
            exposed.append([inf.get("launch_exposed"), inf.get("launch_hidden_trials"), inf.get("launch_sleep_ms")])
            crows["compile_host"].append(_host_ms(cfn, dev, torch))
        rec = out["problems"][str(pid)]
        rec.update({k: [round(v, 6) for v in vs] for k, vs in crows.items()})
        rec["compile_hidden_exposed_trials_sleep_ms"] = exposed
        rec["compile_warmup_s"] = round(warm_s, 3)
        del compiled, cfn, model, sets
        torch.cuda.empty_cache()
    out["cpu_end"] = _cpu()
    return out


def _cpu() -> int:
    try:
        return os.sched_getcpu() if hasattr(os, "sched_getcpu") else -1
    except OSError:
        return -1


_LIBC = None


def _no_aslr_preexec() -> None:
    """preexec_fn (after fork, before exec): ADDR_NO_RANDOMIZE into this process's personality."""
    cur = _LIBC.personality(0xFFFFFFFF)
    if cur == -1 or _LIBC.personality(cur | ADDR_NO_RANDOMIZE) == -1:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE) failed")


def launch_spec(variant: str, argv: list[str], via: str) -> tuple[list[str], dict, object]:
    """``(argv, env, preexec_fn)`` that start ``argv`` under ``variant``; ``via``: setarch or personality."""
    global _LIBC
    env = dict(os.environ)
    env.pop("PYTHONHASHSEED", None)
    if variant in ("hashseed", "fixed"):
        env["PYTHONHASHSEED"] = "0"
    pre = None
    if variant in ("noaslr", "fixed"):
        if via == "setarch":
            argv = ["setarch", os.uname().machine, "-R", *argv]
        else:
            if _LIBC is None:  # loaded in the parent: the preexec_fn only calls it
                _LIBC = ctypes.CDLL(None, use_errno=True)
                _LIBC.personality.argtypes = [ctypes.c_ulong]
                _LIBC.personality.restype = ctypes.c_int
            pre = _no_aslr_preexec
    return argv, env, pre


PROBE = "from pathlib import Path; print(Path('/proc/self/personality').read_text().strip())"


def probe_no_aslr(via: str) -> tuple[bool, str]:
    """Does ``via`` start a child with ADDR_NO_RANDOMIZE set? ``(ok, what the child said or the error)``."""
    argv, env, pre = launch_spec("noaslr", [sys.executable, "-c", PROBE], via)
    try:
        p = subprocess.run(argv, env=env, preexec_fn=pre, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"{type(e).__name__}: {e}"
    said = (p.stdout.strip() or p.stderr.strip())[-300:]
    try:
        return p.returncode == 0 and bool(int(p.stdout.strip(), 16) & ADDR_NO_RANDOMIZE), said
    except ValueError:
        return False, said


def variant_summary(procs: list[dict], ids: list[int], ways: tuple[str, ...]) -> dict:
    """The earlier output's ``summary`` for one variant's processes, plus ``spread_pct``."""
    summary: dict = {}
    for pid in (str(i) for i in ids):
        for way in ways:
            per_proc = [statistics.median(pr["problems"][pid][way]) for pr in procs
                        if pr["problems"].get(pid, {}).get(way)]
            if not per_proc:
                continue
            s = spread(per_proc)
            summary[f"L1/{pid} {way}"] = {
                "median_ms": round(statistics.median(per_proc), 5),
                "between_process_spread": round(s, 4),
                "spread_pct": round(100 * s, 2),
                "per_process_ms": [round(x, 5) for x in per_proc],
            }
    return summary


def spread_table(variants: dict[str, dict], rows: tuple[str, ...] = SPREAD_ROWS) -> dict:
    """``{variant: {problem id: {row: spread in %}}}`` from each variant's ``summary``; rows absent from a
    summary (no compile) are left out."""
    table: dict = {}
    for name, v in variants.items():
        t: dict = {}
        for key, s in v["summary"].items():
            pid, row = key.removeprefix("L1/").split(" ", 1)
            if row in rows:
                t.setdefault(pid, {})[row] = s["spread_pct"]
        table[name] = {pid: {r: t[pid][r] for r in rows if r in t[pid]} for pid in t}
    return table


def format_table(table: dict) -> str:
    names = list(table)
    keys = []
    for name in names:
        for pid, rs in table[name].items():
            keys += [(pid, r) for r in rs if (pid, r) not in keys]
    lines = ["process-to-process spread, (max - min) / median of the per-process medians, %:",
             f"{'problem':8} {'row':15}" + "".join(f" {n:>10}" for n in names)]
    for pid, r in keys:
        cells = [table[n].get(pid, {}).get(r) for n in names]
        lines.append(f"{'L1/' + pid:8} {r:15}" + "".join(f" {c:>10.2f}" if c is not None else f" {'-':>10}"
                                                          for c in cells))
    return "\n".join(lines)


def _write(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)  # a cut run leaves the last whole file


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ids", default="1,3,4,5,12")
    ap.add_argument("--procs", type=int, default=6, help="fresh processes per variant")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="free", help=f"comma list of {', '.join(VARIANTS)} (default: free)")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile (compile_hidden, compile_host)")
    ap.add_argument("--noaslr-via", choices=("auto", "setarch", "personality"), default="auto",
                    help="how noaslr/fixed turn ASLR off (auto: setarch if present, else personality)")
    ap.add_argument("--budget-s", type=float, default=0.0, help="start no cycle that would end after this (0: no limit)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    ids = [int(x) for x in a.ids.split(",") if x]
    if a.child:
        print(json.dumps(child(a.problems, ids, a.rounds, a.compile)))
        return 0
    variants = [v for v in a.variants.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        ap.error(f"unknown variant(s) {', '.join(bad)}: use {', '.join(VARIANTS)}")
    skipped: dict[str, str] = {}
    via = None
    if {"noaslr", "fixed"} & set(variants):
        tries = [a.noaslr_via] if a.noaslr_via != "auto" else (["setarch"] if shutil.which("setarch") else []) + ["personality"]
        why = []
        for t in tries:
            ok, said = probe_no_aslr(t)
            if ok:
                via = t
                break
            why.append(f"{t}: {said}")
        if via is None:
            for v in ("noaslr", "fixed"):
                if v in variants:
                    variants.remove(v)
                    skipped[v] = "ASLR could not be turned off: " + "; ".join(why)
            print(f"warning: skipping noaslr/fixed: {'; '.join(why)}", file=sys.stderr)
            if not variants:
                return 1
    try:
        va_space = Path("/proc/sys/kernel/randomize_va_space").read_text().strip()
    except OSError:
        va_space = None
    ways = WAYS + (COMPILE_WAYS if a.compile else ())
    procs: dict[str, list[dict]] = {v: [] for v in variants}
    order: list[str] = []
    failures: list[dict] = []
    stopped_early = None
    t_start, longest = time.monotonic(), 0.0

    def result() -> dict:
        per = {v: {"summary": variant_summary(procs[v], ids, ways), "processes": procs[v]} for v in variants}
        return {"args": {k: (str(x) if isinstance(x, Path) else x) for k, x in vars(a).items() if k != "child"},
                "noaslr_via": via, "randomize_va_space": va_space, "skipped": skipped, "order": order,
                "failures": failures, "stopped_early": stopped_early, "spread_pct": spread_table(per), "variants": per}

    base = [sys.executable, SELF, "--child", "--problems", str(a.problems), "--out", str(a.out),
            "--ids", a.ids, "--rounds", str(a.rounds)] + (["--compile"] if a.compile else [])
    for k in range(a.procs):
        elapsed = time.monotonic() - t_start
        if a.budget_s and k and elapsed + longest > a.budget_s:
            stopped_early = f"after {k} of {a.procs} cycles, {elapsed:.0f} s (longest cycle {longest:.0f} s)"
            print(f"stopping early: {stopped_early}", flush=True)
            break
        c0 = time.monotonic()
        for v in variants:
            argv, env, pre = launch_spec(v, base, via or "personality")
            t0 = time.monotonic()
            p = subprocess.run(argv, env=env, preexec_fn=pre, capture_output=True, text=True)
            wall_s = round(time.monotonic() - t0, 2)
            order.append(v)
            if p.returncode != 0:
                failures.append({"variant": v, "process": k, "rc": p.returncode, "stderr_tail": p.stderr[-3000:]})
                print(f"process {k} {v} failed (rc {p.returncode}):\n{p.stderr[-3000:]}", file=sys.stderr, flush=True)
            else:
                rec = json.loads(p.stdout.strip().splitlines()[-1])
                rec.update(variant=v, wall_s=wall_s)
                procs[v].append(rec)
                su = rec["startup"]
                print(f"process {k} {v} done in {wall_s} s (aslr_off={su['aslr_off']}, "
                      f"PYTHONHASHSEED={su['pythonhashseed']}, hash('abc')={su['hash_abc']})", flush=True)
            _write(a.out, result())
        longest = max(longest, time.monotonic() - c0)
    out = result()
    _write(a.out, out)
    print(json.dumps({v: x["summary"] for v, x in out["variants"].items()}, indent=1))
    print(format_table(out["spread_pct"]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
