#!/usr/bin/env bash
# H200 session 29, the last call (a fresh machine, about 300 s of device time left): after s29a/s29b and the
# worst rows (session29.sh) showed the largest moves in rows timed without launch hiding,
#   1. scripts/gpu/nvml_samples_probe.py: why every window's gpu_between had no SM clock samples;
#   2. one cached one-slot run of the hide-off rows that moved most (L3/7, 10, 15, 26, 29) with the unhidden
#      host-pacing count (timing._HostPacing): launch_host_share and host_bound per row.
# Carry .whl, .data, .gpu; one tarball in $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
SECONDS=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD KBENCH_SANDBOX_LAYERS=${KBENCH_SANDBOX_LAYERS:-netns,caps}
mkdir -p "$OUT/v" results
timeout 40 python3 scripts/gpu/nvml_samples_probe.py > "$OUT/v/nvml_samples.json" 2>&1; echo "nvml probe rc=$? ${SECONDS}s"
head -c 3000 "$OUT/v/nvml_samples.json"
rm -f results/sweep.db; gunzip -c .gpu/sweep.db.gz > results/sweep.db && chmod u+w results/sweep.db
t=$(( ${T_LIMIT:-250} - SECONDS ))
timeout $t python3 scripts/gpu/sweep.py --problems .data/kernelbench --out "$OUT/v" --db results/sweep.db \
  --levels 3 --ids 7,10,15,26,29 --phase cached --tag paced --gpus 0 --budget-s $((t - 10)) > "$OUT/v/sweep.log" 2>&1
echo "paced run rc=$? ${SECONDS}s"; tail -3 "$OUT/v/sweep.log"
python3 - <<'PY' | tee "$OUT/v/paced.txt"
import json, sqlite3
c = sqlite3.connect("results/sweep.db")
q = """select s.problem_id, r.outcome, r.candidate_ms, r.extra from results r join attempts a on a.id = r.attempt_pk
       join samples s on s.id = a.sample_pk join runs ru on ru.id = s.run_id where ru.run_name = 'sweep-cached-paced'"""
for pid, outcome, ms, extra in sorted(c.execute(q)):
    ex = json.loads(extra or "{}"); ti = ex.get("timing_info") or {}
    keys = ("launch_hiding", "launch_unhidden_trials", "launch_unhidden_host_bound", "launch_host_share",
            "launch_hidden_trials", "launch_host_bound")
    prof = sum((ex.get("profile") or {}).get("kernel_us", {}).values()) / 1000.0
    print(f"L3/{pid} {outcome} {ms} ms, profiled kernels {prof:.2f} ms, host_bound {ex.get('host_bound')},",
          {k: ti.get(k) for k in keys}, [w.get("gpu_between") for w in ex.get("timing_windows") or []][:1])
PY
rm -f "$OUT/v/sweep.db"; gzip -c results/sweep.db > "$OUT/v/sweep.db.gz"
(cd "$OUT" && tar czf v.tgz v && rm -rf v)
echo "call total: ${SECONDS}s"
