#!/usr/bin/env bash
# H200 session 34 (planned in stop 39): one call (~560 s) that checks stop 39's changes on a GPU machine.
#   1. scripts/gpu/landlock_diag.py (~60 s): which sandbox variants let CUDA initialise. Landlock now grants /dev's
#      devices one by one (not /dev/shm); the diag also tries /proc and /dev/shm as extra folders. A Landlock
#      variant that passes names what to put in KBENCH_SANDBOX_WRITE_DIRS to keep Landlock on for GPU candidates.
#   2. scripts/gpu/exploits.py (<= 200 s): the GPU exploit suite with the new statistics/math protection and the
#      trusted side's own timing summary (no honest candidate may now come out timer-tamper).
#   3. a cached sweep of 12 level-1 problems with the CUDA copy kernel (sweep.py --kernel cuda): the build pool's
#      new compile_ext path on the GPU machine, where one compile should serve all 12 candidates.
# Carry .whl, .data (level1-3 folders) and .gpu (sweep.db.gz); move docs/gpu aside first.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" results
SECONDS=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
timeout 120 python3 scripts/gpu/landlock_diag.py --out "$OUT/landlock_diag.json" > "$OUT/landlock_diag.txt" 2>&1
echo "landlock_diag rc=$? at ${SECONDS}s"; cat "$OUT/landlock_diag.txt"
rm -rf results/build_cache results/sweep.db .gpu/sweep.db
gunzip -c .gpu/sweep.db.gz > .gpu/sweep.db && chmod u+w .gpu/sweep.db
env OUT="$OUT" PHASES=exploits,sweep T_EXPLOITS=200 SWEEP_LEVELS=1 SWEEP_IDS=1,2,3,4,5,6,7,8,9,10,11,12 \
  SWEEP_PHASE=cached SWEEP_TAG=s34k SWEEP_KERNEL=cuda SWEEP_GPUS=0,0,0,0,0,0 SWEEP_ONLY=sweep-cold-l1,sweep-cold-l1big,sweep-cold-l1rest,sweep-cold-big \
  T_SWEEP=$(( 540 - SECONDS - 200 )) bash scripts/gpu/session9.sh
echo "phases rc=$? at ${SECONDS}s"
gzip -c results/sweep.db > "$OUT/s34.db.gz"
tail -30 "$OUT/session.log"
echo "call total: ${SECONDS}s"
