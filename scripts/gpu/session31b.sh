#!/usr/bin/env bash
# H200 session 31, last call (stop 38): do the small jobs beside a large job lengthen it? The large elementwise
# level-1 problems L1/19, 21, 23, 25 (6 GiB outputs; 8.4-12.2 s each inside the six-slot sweeps s29b and s31k) as
# one cached run with one slot, nothing beside them, the Triton copy kernel as in s29b, from the same fresh state.
# Carry .whl, .data and .gpu; move docs/gpu aside.   bash scripts/gpu/session31b.sh
set -u -o pipefail
OUT=${OUT:-/tmp/out}
SECONDS=0
rm -rf results/build_cache results/sweep.db results/sweep.db-journal .gpu/sweep.db
gunzip -c .gpu/sweep.db.gz > .gpu/sweep.db && chmod u+w .gpu/sweep.db
mkdir -p "$OUT/alone"
OUT=$OUT/alone PHASES=sweep SWEEP_LEVELS=1 SWEEP_PHASE=cached SWEEP_TAG=alone SWEEP_GPUS=0 SWEEP_IDS=19,21,23,25 \
  T_SWEEP=${T_SWEEP:-200} bash scripts/gpu/session9.sh > "$OUT/alone/driver.log" 2>&1
rm -f "$OUT/alone/sweep.db"
python3 - <<'PY' > "$OUT/alone/phases.txt" 2>&1
import json, sqlite3
con = sqlite3.connect("results/sweep.db")
for l, p, ph in con.execute("select s.level, s.problem_id, x.phase_s from samples s join runs r on r.id = s.run_id "
                            "join attempts t on t.sample_pk = s.id join results x on x.attempt_pk = t.id "
                            "where r.run_name = 'sweep-cached-alone' order by s.problem_id"):
    ph = json.loads(ph)
    print(l, p, {k: round(ph.get(k, 0), 2) for k in ("total", "slot_start", "slot_build_construct", "slot_correctness",
                                                      "compare", "slot_timing", "slot_recheck", "yield_wait")})
PY
cat "$OUT/alone/phases.txt"; tail -3 "$OUT/alone/session.log"
gzip -c results/sweep.db > "$OUT/alone/alone.db.gz"
(cd "$OUT" && tar czf alone.tgz alone && rm -rf alone)
echo "call total: ${SECONDS}s"
