"""Issue 3: the two-run repeatability figures with host-bound timings set apart.

Reads the two stores of one repeatability pair, unpacked to /tmp/repA.db and /tmp/repB.db (e.g. from
docs/gpu/2026-12-01-s8/repeat-kbench-hide_launchtrue-{A,B}.db.gz). A timing is host-bound when, with
launch hiding on, more than half of its hidden trials took the host's time
(device.host_bound_callables). Prints the host-bound rows, then median and p95 of |delta speedup| /
speedup between the runs over the rest. Needs no GPU.
"""
import sqlite3, json, statistics, collections
def hb(d): return (d.get("launch_host_bound") or 0) > 0.5 * max(1, d.get("launch_hidden_trials") or 0)
Q = """select s.problem_id, s.model, r.speedup_eager, r.speedup_compile, r.extra
       from results r join attempts a on a.id=r.attempt_pk join samples s on s.id=a.sample_pk"""
rows = {}; base_hb = collections.defaultdict(lambda: {"eager": False, "compile:default": False})
for r in "AB":
    c = sqlite3.connect(f"/tmp/rep{r}.db")
    for pid, model, se, sc, ex in c.execute(Q):
        e = json.loads(ex or "{}")
        rows.setdefault((pid, model), {})[r] = (se, sc, e.get("timing_info") or {})
        for m, d in (e.get("baseline_info") or {}).items():
            if isinstance(d, dict) and hb(d): base_hb[pid][m] = True
de, dc = [], []
for (pid, model), v in sorted(rows.items()):
    a, b = v["A"], v["B"]
    cand = hb(a[2]) or hb(b[2])
    if not cand and not base_hb[pid]["eager"]: de.append(abs(a[0]-b[0])/a[0])
    if not cand and not base_hb[pid]["compile:default"]: dc.append(abs(a[1]-b[1])/a[1])
    if cand or any(base_hb[pid].values()): print("host-bound:", pid, model, "candidate" if cand else "", dict(base_hb[pid]))
def p95(x):
    x = sorted(x); k = 0.95*(len(x)-1); f = int(k); return x[f] + (x[min(f+1,len(x)-1)]-x[f])*(k-f)
print("vs eager, no host-bound timing: n=%d median %.4f p95 %.4f max %.4f" % (len(de), statistics.median(de), p95(de), max(de)))
print("vs compile, no host-bound timing: n=%d median %.4f p95 %.4f max %.4f" % (len(dc), statistics.median(dc), p95(dc), max(dc)))
