#!/usr/bin/env bash
# Session 23 (2026-12-03): protocol.weights_device on the GPU, side by side in one call. Two cached runs of the
# same level-3 problems (big weights: L3/2 2.1e9, L3/11 VGG16 1.4e8; L3/44 builds its float64 twin anew) from
# the store in .gpu/sweep.db: first with the reference and the candidates built on the device (kbench's
# default now), then a control with -P weights_device=cpu (the host's build, as before). Each under T_RUN s.
#   bash scripts/gpu/session23.sh        (writes $OUT/weights_device.txt and the two runs' logs and store)
set -u -o pipefail
OUT=${OUT:-/tmp/kbench-out}
mkdir -p "$OUT" results
export PYTHONUNBUFFERED=1 KBENCH_SANDBOX_LAYERS=${KBENCH_SANDBOX_LAYERS:-netns,caps}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
cp .gpu/sweep.db results/wd.db && chmod u+w results/wd.db
summary() {
python3 - <<'PY' | tee "$OUT/weights_device.txt"
import json, sqlite3, sys
c = sqlite3.connect("results/wd.db")
q = ("select r.run_name, s.problem_id, x.outcome, x.phase_s, x.extra from results x join attempts a on a.id = x.attempt_pk "
     "join samples s on s.id = a.sample_pk join runs r on r.id = s.run_id where r.run_name like 'sweep-cached-wd-%' order by 2, 1")
for run, pid, outcome, ps, ex in c.execute(q):
    ps, ex = json.loads(ps or "{}"), json.loads(ex or "{}")
    w = ex.get("weights") or {}
    print(f"{run:24s} L3/{pid:<3d} {outcome:8s} reference {ps.get('reference', 0):6.2f} s  construct {ps.get('construct', 0):6.2f} s"
          f"  total {ps.get('total', 0):6.2f} s  weights drawn on {ex.get('weights_drawn_on')}, candidate built on "
          f"{w.get('built_on')} ({w.get('transferred')} transferred){' ' + w['device_build_error'] if w.get('device_build_error') else ''}"
          f"  flags {ex.get('problem_flags')}")
PY
}
IDS=${IDS:-2,11,44}
for v in device cpu; do
  t=${T_RUN:-75}; [ $v = cpu ] && t=${T_CPU:-$t}
  timeout $(( t + 40 )) python3 scripts/gpu/sweep.py --problems .data/kernelbench --out "$OUT" --db results/wd.db \
    --levels 3 --ids "$IDS" --phase cached --tag wd-$v --gpus 0,0,0,0,0,0 -P weights_device=$v --budget-s $t \
    > "$OUT/driver_$v.log" 2>&1
  tail -2 "$OUT/driver_$v.log"; summary
done
gzip -c results/wd.db > "$OUT/wd.db.gz"
