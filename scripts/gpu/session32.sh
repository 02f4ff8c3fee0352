#!/usr/bin/env bash
# H200 session 32, as planned in stop 38 (scripts/gpu/README.md's plan, item 1): KBENCH_LANE_EXCLUSIVE's first pair.
# Two whole cached sweeps (Triton copy kernel, six slots, lane priority on) from the same fresh state on one machine,
# the one with KBENCH_LANE_EXCLUSIVE=1 first this time (in sessions 28-29 the sweep with the new switch ran second).
# Carry .whl, .data (level1-3 folders) and .gpu (sweep.db.gz); move docs/gpu aside before each call.
#   1: bash scripts/gpu/session32.sh first    s32x (KBENCH_LANE_EXCLUSIVE=1) from a fresh state, in the background
#   2: bash scripts/gpu/session32.sh second   s32x waited for; the same fresh state; s32o (the switch off)
#   3: bash scripts/gpu/session32.sh third    s32o waited for
# Read afterwards: scripts/analyze_sweep.py for each (wall, the large jobs, lane_start_wait in phase sums),
# scripts/compare_sweeps.py --a ...:sweep-cached-s32o --b ...:sweep-cached-s32x, scripts/large_jobs_timeline.py.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
SECONDS=0
fresh_sweep_state() {
  ls -d .data/kernelbench/level1 .data/kernelbench/level2 .data/kernelbench/level3 > /dev/null || exit 2
  rm -rf results/build_cache results/sweep.db results/sweep.db-journal .gpu/sweep.db
  gunzip -c .gpu/sweep.db.gz > .gpu/sweep.db && chmod u+w .gpu/sweep.db
}
left() { echo $(( ${1:-565} - SECONDS )); }
pack() { (cd "$OUT" && tar czf "$1.tgz" "$1" && rm -rf "$1"); }
case ${1:?first, second or third} in
  first)
    fresh_sweep_state
    bash scripts/gpu/session21.sh start s32x KBENCH_LANE_EXCLUSIVE=1 && bash scripts/gpu/session21.sh wait s32x $(left 555)
    pack s32x ;;
  second)
    bash scripts/gpu/session21.sh wait s32x ${T_WAIT_X:-300} || exit
    mv "$OUT/s32x" "$OUT/s32x-end"; pack s32x-end
    fresh_sweep_state
    bash scripts/gpu/session21.sh start s32o KBENCH_LANE_EXCLUSIVE=0 && bash scripts/gpu/session21.sh wait s32o $(left 555)
    pack s32o ;;
  third)
    bash scripts/gpu/session21.sh wait s32o ${T_WAIT_O:-300} || exit
    mv "$OUT/s32o" "$OUT/s32o-end"; pack s32o-end ;;
esac
echo "call total: ${SECONDS}s"
