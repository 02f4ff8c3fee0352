"""Does a host-bound time follow the CPU a process runs on, or the process? (issue 3, H200 session 28)

    python3 scripts/gpu/cpu_probe.py --out $OUT/cpu_probe.json [--processes 4] [--ops 400] [--repeats 5]

H200 session 27 saw the same host-bound calls (L1/12's candidate, L1/4's eager) take one of two levels,
up to 2.4x apart, in different processes on a quiet host. This probe separates the candidates for the
cause. Each of ``--processes`` fresh processes pins itself to one CPU (its *init* CPU, spread over the
host) before CUDA starts, then moves itself onto every CPU it may use in turn and, on each, times a
host-bound loop: ``--ops`` launches of a one-element ``torch.add`` between two CUDA events, ``--repeats``
times (the figure is the median, in microseconds per launch, of the events' time and of the host's
``perf_counter`` time). If the level follows the CPU, a CPU's column is the same in every process; if it
follows the process (where its CUDA context was made, say), a process's row is the same on every CPU.

Writes one JSON object: the host's CPUs (package, core, NUMA node, MHz), the GPU's PCI bus and NUMA node,
and one record per (process, CPU). Prints a table of process x CPU. Needs torch with CUDA; imports only
torch and the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cpu_places(cpus: list[int]) -> dict[int, dict]:
    """Package, core, NUMA node and current MHz of each logical CPU (None where the host does not say)."""
    mhz: dict[int, float] = {}
    cur = None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("processor"):
            cur = int(line.split(":")[1])
        elif line.startswith("cpu MHz") and cur is not None:
            mhz[cur] = float(line.split(":")[1])
    out = {}
    for c in cpus:
        base = f"/sys/devices/system/cpu/cpu{c}"
        node = None
        try:
            node = next(int(n[4:]) for n in os.listdir(base) if n.startswith("node") and n[4:].isdigit())
        except (OSError, StopIteration):
            pass
        out[c] = {"package": _read(f"{base}/topology/physical_package_id"),
                  "core": _read(f"{base}/topology/core_id"),
                  "siblings": _read(f"{base}/topology/thread_siblings_list"), "node": node, "mhz": mhz.get(c)}
    return out


def gpu_place() -> dict:
    """The GPU's PCI bus id and the NUMA node sysfs gives for it (None where unknown)."""
    try:
        bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return {"bus": None, "node": None}
    short = bus.lower()[-12:]  # "0000:xx:yy.z" from nvidia-smi's "00000000:xx:yy.z"
    return {"bus": bus, "node": _read(f"/sys/bus/pci/devices/{short}/numa_node"),
            "local_cpus": _read(f"/sys/bus/pci/devices/{short}/local_cpulist")}


def _current_cpu() -> int | None:
    try:
        return int((_read("/proc/self/stat") or "").rsplit(")", 1)[1].split()[36])
    except (IndexError, ValueError):
        return None


def child(init_cpu: int, cpus: list[int], ops: int, repeats: int) -> None:
    """One probe process: pinned to ``init_cpu`` before CUDA starts, then timed on each of ``cpus``."""
    os.sched_setaffinity(0, {init_cpu})
    import torch

    x = torch.zeros(1, device="cuda")
    y = torch.empty_like(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def measure() -> dict:
        ev, host = [], []
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            start.record()
            for _ in range(ops):
                torch.add(x, 1, out=y)
            end.record()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            ev.append(start.elapsed_time(end) * 1000.0 / ops)
            host.append((t1 - t0) * 1e6 / ops)
        return {"event_us": statistics.median(ev), "host_us": statistics.median(host),
                "event_spread_us": max(ev) - min(ev), "ran_on": _current_cpu()}

    for _ in range(3):  # warm-up on the init CPU
        measure()
    first = measure()
    print(json.dumps({"init_cpu": init_cpu, "cpu": "init", **first}), flush=True)
    for c in cpus:
        os.sched_setaffinity(0, {c})
        time.sleep(0.01)
        measure()
        print(json.dumps({"init_cpu": init_cpu, "cpu": c, **measure()}), flush=True)
    os.sched_setaffinity(0, {init_cpu})
    time.sleep(0.01)
    print(json.dumps({"init_cpu": init_cpu, "cpu": "init-again", **measure()}), flush=True)


def series(init_cpu: int, seconds: float, ops: int) -> None:
    """``--series``: one process pinned to ``init_cpu`` times blocks of ``ops`` launches back to back for
    ``seconds``; one line per block (its start in ms from the first, microseconds per launch): how long a
    level lasts."""
    os.sched_setaffinity(0, {init_cpu})
    import torch

    x = torch.zeros(1, device="cuda")
    y = torch.empty_like(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    t_first = time.perf_counter()
    while time.perf_counter() - t_first < seconds:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        for _ in range(ops):
            torch.add(x, 1, out=y)
        end.record()
        torch.cuda.synchronize()
        out.append([round((t0 - t_first) * 1000, 2), round(start.elapsed_time(end) * 1000.0 / ops, 3)])
    print(json.dumps({"init_cpu": init_cpu, "series": out}), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--ops", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--series", type=float, default=0.0,
                    help="instead: each process times blocks of --ops launches back to back for this many seconds")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    if a.child is not None:
        if a.series > 0:
            series(a.child, a.series, a.ops)
        else:
            child(a.child, cpus, a.ops, a.repeats)
        return 0
    places = cpu_places(cpus)
    gpu = gpu_place()
    inits = [cpus[(i * len(cpus)) // max(1, a.processes)] for i in range(a.processes)]
    records = []
    for i, init in enumerate(inits):
        t0 = time.time()
        proc = subprocess.run([sys.executable, __file__, "--out", str(a.out), "--child", str(init),
                               "--ops", str(a.ops), "--repeats", str(a.repeats), "--series", str(a.series)],
                              capture_output=True, text=True, timeout=300)
        rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        for r in rows:
            r["process"] = i
        records += rows
        if proc.returncode:
            print(f"process {i} rc={proc.returncode}: {proc.stderr[-2000:]}", file=sys.stderr)
        print(f"process {i} (init cpu {init}): {len(rows)} rows in {time.time() - t0:.1f}s", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"cpus": places, "gpu": gpu, "records": records}, indent=1))
    if a.series > 0:
        for r in records:
            lv = [b[1] for b in r.get("series", [])]
            runs, prev = [], None  # lengths (in blocks) of the runs of one level (below/above 8 us)
            for v in lv:
                s = v < 8.0
                if s == prev:
                    runs[-1] += 1
                else:
                    runs.append(1)
                prev = s
            print(f"p{r['process']}@{r['init_cpu']}: {len(lv)} blocks, below 8 us: {sum(v < 8.0 for v in lv)}, "
                  f"runs of one level (blocks): {runs[:60]}")
        return 0
    print("gpu:", gpu)
    print("cpu:  " + " ".join(f"{c:>6}" for c in ["init"] + cpus + ["again"]))
    print("node: " + " ".join(f"{str(places[c]['node']):>6}" for c in cpus))
    for i, init in enumerate(inits):
        row = {str(r["cpu"]): r["event_us"] for r in records if r["process"] == i}
        cells = [row.get("init")] + [row.get(str(c)) for c in cpus] + [row.get("init-again")]
        print(f"p{i}@{init:<3}" + " ".join(f"{v:6.2f}" if v is not None else "     -" for v in cells))
    print("(CUDA-event microseconds per one-element add, median of the repeats)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
