"""Where a run's wall time went: phase split, timing windows (GPU busy), candidates per minute.

    python scripts/analyze_sweep.py --db results/sweep.db [--run sweep-cold --run sweep-cached]

For each run: wall time (run created -> finished), candidates, seconds per candidate amortized, the
sum over candidates of each evaluation phase (reference setup, build, construct, time, baselines,
total in the device slot), the time the device spent inside timing windows (candidate and
baselines: the "GPU busy" fraction, since only timing needs the device to itself), and a check that
no two timing windows on the same device overlap.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

#: an H200's device memory (bytes), for runs whose hardware record lacks it
H200_BYTES = 150_109_880_320


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", action="append", default=None)
    def utc_time(text: str) -> datetime:
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a time; give one like '2026-12-02 07:06'") from None

    ap.add_argument("--since", default=None, type=utc_time,
                    help="only results stored at or after this UTC time (e.g. '2026-12-02 07:06'): one call of a run "
                         "resumed over several")
    ap.add_argument("--until", default=None, type=utc_time,
                    help="only results stored before this UTC time (e.g. '2026-12-03 02:53'): with --since, one call")
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kernelbench_harness.execution.memledger import UTIL
    from kernelbench_harness.store import Store

    st = Store(a.db, create=False)
    runs = a.run or [r.run_name for r in st.list_runs()]
    for name in runs:
        info = st.get_run(name)
        if info is None:
            print(f"no run {name}")
            continue
        atts = st.attempts(name)
        if a.since:
            atts = [at for at in atts if at.created_at and at.created_at.replace(tzinfo=None) >= a.since]
            print(f"   (results stored since {a.since}: {len(atts)})")
        if a.until:
            atts = [at for at in atts if at.created_at and at.created_at.replace(tzinfo=None) < a.until]
            print(f"   (results stored before {a.until}: {len(atts)})")
        wall = (info.finished_at - info.created_at).total_seconds() if info.finished_at and info.created_at else None
        phases: dict[str, float] = defaultdict(float)
        windows = []
        outcomes: dict[str, int] = defaultdict(int)
        for at in atts:
            r = at.result
            outcomes[str(r.outcome)] += 1
            for k, v in r.phase_s.items():
                phases[k] += float(v)
            windows += r.extra.get("timing_windows") or []
            for bi in (r.extra.get("baseline_info") or {}).values():
                if bi and bi.get("windows"):  # alternated baselines: one window per block
                    windows += bi["windows"]
                elif bi and bi.get("window"):
                    windows.append(bi["window"])
        # a problem's baselines are measured once and their record is copied to every candidate of that
        # problem: count each window once
        windows = list({(w["device"], w["start"], w["end"], w.get("pid"), w.get("what")): w
                        for w in windows}.values())
        busy = sum(w["end"] - w["start"] for w in windows)
        by_dev = defaultdict(list)
        for w in windows:
            by_dev[w["device"]].append(w)
        overlaps = 0
        for ws in by_dev.values():
            ws.sort(key=lambda w: w["start"])
            overlaps += sum(1 for x, y in zip(ws, ws[1:]) if y["start"] < x["end"])
        n = len(atts)
        print(f"== {name}: {n} candidates, outcomes {dict(outcomes)}")
        if wall:
            print(f"   wall {wall:.1f} s = {wall / max(1, n):.2f} s per candidate, {60 * n / wall:.1f} candidates/min")
            print(f"   inside timing windows: {busy:.1f} s = {100 * busy / wall:.1f}% of the wall (GPU busy timing)")
        stamps = sorted(at.created_at for at in atts if at.created_at)
        if len(stamps) >= 2:  # a run cut short has no wall: the span from its first result to its last
            span = (stamps[-1] - stamps[0]).total_seconds()
            print(f"   first to last result: {span:.1f} s for {len(stamps) - 1} more = "
                  f"{span / (len(stamps) - 1):.2f} s per candidate; timing windows {100 * busy / max(span, 1e-9):.1f}% "
                  f"of it; status {info.status}")
            by_level: dict[int, list] = defaultdict(list)
            for at in atts:
                if at.created_at:
                    by_level[at.level].append(at.created_at)
            if len(by_level) > 1:
                for lv, ts in sorted(by_level.items()):
                    ts.sort()
                    sp = (ts[-1] - ts[0]).total_seconds()
                    print(f"     level {lv}: {len(ts)} candidates, first to last {sp:.1f} s"
                          + (f" = {sp / (len(ts) - 1):.2f} s per candidate" if len(ts) > 1 else ""))
        print(f"   timing windows: {len(windows)} on {len(by_dev)} device(s), overlapping pairs: {overlaps}")
        lane = [w["lane_wait_s"] for w in windows if w.get("lane_wait_s")]
        if lane:  # KBENCH_LANE_PRIORITY: windows held unqueued while another slot's large job computed
            print(f"   windows that waited for the lane's large job: {len(lane)}, {sum(lane):.1f} s "
                  f"(median {statistics.median(lane):.2f} s, max {max(lane):.2f} s)")
        witnessed = [w for w in windows if isinstance(w.get("gpu_pids"), dict)]
        if witnessed:  # recorded since session 28: the processes NVML saw on the SMs during each window
            # a window's own processes are two (the candidate's, timing, and its slot's); more are another's work
            counts = Counter(min(len(w["gpu_pids"]), 3) for w in witnessed)
            print("   windows by processes on the SMs (NVML; 3 = three or more, more than the window's own two): "
                  + ", ".join(f"{k}: {counts[k]}" for k in sorted(counts)) + f" of {len(witnessed)}")
        unkept = [w for w in windows if isinstance(w.get("gpu_between"), dict) and w["gpu_between"].get("n") is None]
        if unkept:  # session 29's driver kept no SM clock samples (older stores wrote n 0 for that)
            print(f"   SM clock inside windows: not kept by the driver in {len(unkept)} windows")
        between = [w["gpu_between"] for w in windows if isinstance(w.get("gpu_between"), dict)
                   and w["gpu_between"].get("sm_mhz_min") is not None]
        if between:  # recorded since session 28: NVML's SM clock samples inside each window
            dips = [b for b in between if b["sm_mhz_min"] < 0.95 * b["sm_mhz_max"]]
            print(f"   SM clock sampled inside windows (NVML): lowest {min(b['sm_mhz_min'] for b in between):.0f} MHz; "
                  f"windows with a sample below 95% of their highest: {len(dips)} of {len(between)}")
        busy_cpu = [w["host_cpu_busy"] for w in windows if "host_cpu_busy" in w]
        if len(busy_cpu) >= 2:  # recorded since session 4: how loaded the host was while timing
            p90 = statistics.quantiles(busy_cpu, n=10)[-1]
            print(f"   host CPU busy while timing: median {statistics.median(busy_cpu):.0%}, p90 {p90:.0%}, "
                  f"max {max(busy_cpu):.0%}")
        for k in ("reference", "build", "construct", "time", "baselines", "total"):
            if k in phases:
                print(f"   sum of phase '{k}': {phases[k]:.1f} s")
        slot = {k: v for k, v in phases.items() if k.startswith("slot_")}
        if slot:  # the trusted side's split of each candidate's evaluation
            print("   inside the device slot: " + ", ".join(f"{k[5:]} {v:.1f} s" for k, v in
                                                          sorted(slot.items(), key=lambda kv: -kv[1])))
        trial = {k: v for k, v in phases.items() if k.startswith("trial_") or k == "compare"}
        if trial:  # inside correctness: the candidate process's load, call, checks; the trusted comparisons
            print("   inside correctness: " + ", ".join(f"{k} {v:.1f} s" for k, v in
                                                       sorted(trial.items(), key=lambda kv: -kv[1])))
        if "yields" in phases:  # a slot gave way to another's timing window (DeviceEvaluator._gpu_yield)
            print(f"   gave way to other slots' windows: {phases['yields']:.0f} time(s), "
                  f"{phases.get('yield_wait', 0.0):.1f} s waiting")
        # how the slots shared the GPU's memory (the ledger: execution/memledger.py)
        exch: dict[str, int] = defaultdict(int)
        tsets: dict[int, int] = defaultdict(int)
        claims, reruns, trusted_oom = [], 0, 0
        peaks: list[tuple[int, float, Any]] = []
        total_bytes = int((info.hardware or {}).get("device_memory_bytes") or 0) or H200_BYTES
        for at in atts:
            x = at.result.extra or {}
            if x.get("input_exchange"):
                exch[x["input_exchange"]] += 1
            if isinstance(x.get("timing_sets"), int):
                tsets[x["timing_sets"]] += 1
            if isinstance(x.get("memory_claim"), (int, float)) and x["memory_claim"] > 0:
                claims.append(float(x["memory_claim"]))
            reruns += bool(x.get("rerun_alone"))
            trusted_oom += bool(x.get("trusted_oom"))
            tp, cp = x.get("trusted_device_peak_bytes"), x.get("candidate_device_peak_bytes")
            if isinstance(tp, int) and isinstance(x.get("memory_claim"), (int, float)):
                # a job's device memory at its peak (trusted process + candidate process, each its allocator's
                # own high-water mark) against what it claimed (memledger.UTIL of the device per unit)
                cand = cp if isinstance(cp, int) else 0
                peaks.append((tp + cand, float(x["memory_claim"]) * UTIL * total_bytes, at, max(tp, cand)))
        if exch or claims:
            line = "   memory: input exchange " + ", ".join(f"{k} {v}" for k, v in sorted(exch.items()))
            if tsets:
                line += "; timing sets " + ", ".join(f"{k}: {v}" for k, v in sorted(tsets.items()))
            if claims:
                line += f"; claims median {statistics.median(claims):.3f}, max {max(claims):.3f}"
            if phases.get("memory_wait"):
                line += f"; waited for memory {phases['memory_wait']:.1f} s"
            print(line + f"; re-run alone after an oom {reruns}; trusted-side oom {trusted_oom}")
        if peaks:
            over = [(u, c, at) for u, c, at, _m in peaks if u > c]
            ratio = sorted(u / c for u, c, _, _m in peaks if c > 0)
            lower = sorted(m / c for _u, c, _, m in peaks if c > 0)
            # each process's own high-water mark, summed: an upper bound of the job's peak (the trusted side's
            # judging and the candidate's timing copies need not coincide)
            print(f"   device memory, trusted + candidate high-water marks / claimed: {len(peaks)} job(s), median "
                  f"{statistics.median(ratio):.2f}, max {ratio[-1]:.2f}; over the claim: {len(over)}" if ratio else "")
            if lower:  # the larger of the two alone: a lower bound of the job's peak (large jobs take turns)
                print(f"   the larger of the two / claimed: median {statistics.median(lower):.2f}, max {lower[-1]:.2f}; "
                      f"over the claim: {sum(1 for x in lower if x > 1)}")
            for u, c, at in sorted(over, key=lambda t: -t[0] / max(t[1], 1))[:8]:
                print(f"     L{at.level}/{at.problem_id}: {u / 2**30:.1f} GiB used, {c / 2**30:.1f} GiB claimed")
        large_jobs(atts)
        startup = (info.config or {}).get("startup_s")
        if startup:  # before the run's record: interpreter, imports, problems; then the device slots
            print("   start-up: " + ", ".join(f"{k} {v} s" for k, v in startup.items()))
        probe = (info.hardware or {}).get("host_probe_ms")
        if probe is not None:  # the host's speed (hardware.host_probe_ms; stored since H200 session 20)
            print(f"   host probe: {probe} ms")
        warm = (info.config or {}).get("warm") or (info.hardware or {}).get("warm")
        if warm:
            per = {k: v for k, v in warm.items() if isinstance(v, dict)}
            waits = sum(float(v.get("_lock_wait_s") or 0.0) for v in per.values())
            threads = f", {warm['_compile_threads']} compile threads each" if "_compile_threads" in warm else ""
            print(f"   warm-up: {len(per)} problem(s) in {warm.get('_wall_s')} s, {waits:.1f} s waiting for the "
                  f"device lock{threads}")
    return 0


#: a job claiming more than this fraction of the device is "large": two of them rarely fit at once
LARGE_CLAIM = 0.3


def large_jobs(atts: list[Any]) -> None:
    """The large jobs' chain (claims above :data:`LARGE_CLAIM`): they run about one at a time, so their active
    time (in the slot, after the memory wait) bounds the sweep's wall. Prints how many, their active time
    (sum, mean), what waiting on other slots' windows and the comparisons took of it, and the share of the
    span from the first large job's start to the last one's end with none, one, or two or more active."""
    iv = []
    for at in atts:
        x, p = at.result.extra or {}, at.result.phase_s or {}
        if float(x.get("memory_claim") or 0) <= LARGE_CLAIM or not at.created_at or "total" not in p:
            continue
        end = at.created_at.timestamp()
        start = end - float(p["total"]) + float(p.get("memory_wait", 0.0))
        iv.append((start, end, float(p.get("yield_wait", 0.0)), float(p.get("compare", 0.0)),
                   f"L{at.level}/{at.problem_id}", float(p.get("reference", 0.0)), float(p.get("construct", 0.0))))
    if not iv:
        return
    active = [e - s for s, e, *_ in iv]
    t0, t1 = min(s for s, *_ in iv), max(e for _s, e, *_ in iv)
    # the span cut at every start and end: how many large jobs were active in each piece
    cuts = sorted({t for s, e, *_ in iv for t in (s, e)})
    share = [0.0, 0.0, 0.0]
    for a, b in zip(cuts, cuts[1:]):
        n = sum(1 for s, e, *_ in iv if s <= a and e >= b)
        share[min(n, 2)] += b - a
    span = max(t1 - t0, 1e-9)
    print(f"   large jobs (claim > {LARGE_CLAIM:.0%} of the device): {len(iv)}, active {sum(active):.1f} s "
          f"(mean {statistics.mean(active):.2f} s: other slots' windows {statistics.mean(x[2] for x in iv):.2f} s, "
          f"comparisons {statistics.mean(x[3] for x in iv):.2f} s); over their span of {span:.1f} s, none active "
          f"{share[0] / span:.0%}, one {share[1] / span:.0%}, two or more {share[2] / span:.0%}")
    # the chain's longest links, with the host work in them (the reference's set-up, the candidate's construction)
    longest = sorted(iv, key=lambda x: x[0] - x[1])[:3]
    print("     longest: " + "; ".join(f"{k} {e - s:.1f} s (windows {y:.1f}, reference {r:.1f}, construct {c:.1f})"
                                       for s, e, y, _cmp, k, r, c in longest))


if __name__ == "__main__":
    raise SystemExit(main())
