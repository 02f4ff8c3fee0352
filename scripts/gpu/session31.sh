#!/usr/bin/env bash
# H200 session 31 (stop 38). Session 30's call 1 ran the cached sweep with SWEEP_KERNEL=cuda over levels 2-3 only
# (.data/kernelbench lacked level1: a set-up slip) and showed 15 compiles of the one copy kernel; the build pool now
# lets one process compile an extension that several candidates share (80807d8). This call runs the same sweep over
# all 248 candidates, from the same fresh state as s29a/s29b/s30k. Carry .whl, .data and .gpu; move docs/gpu aside.
#   bash scripts/gpu/session31.sh          the cached sweep s31k (SWEEP_KERNEL=cuda, lane priority on), ~570 s at most
# Read afterwards: scripts/analyze_sweep.py (s31k) and scripts/compare_sweeps.py (s31k against s29b).
set -u -o pipefail
OUT=${OUT:-/tmp/out}
SECONDS=0
ls -d .data/kernelbench/level1 .data/kernelbench/level2 .data/kernelbench/level3 || exit 2
rm -rf results/build_cache results/sweep.db results/sweep.db-journal .gpu/sweep.db
gunzip -c .gpu/sweep.db.gz > .gpu/sweep.db && chmod u+w .gpu/sweep.db
bash scripts/gpu/session21.sh start s31k SWEEP_KERNEL=cuda && bash scripts/gpu/session21.sh wait s31k $(( 555 - SECONDS ))
(cd "$OUT" && tar czf s31k.tgz s31k && rm -rf s31k)
echo "call total: ${SECONDS}s"
