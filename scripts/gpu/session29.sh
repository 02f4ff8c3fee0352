#!/usr/bin/env bash
# H200 session 29, as planned in stop 36 (scripts/gpu/README.md's plan). Back to back on one machine; carry .whl, .data
# and .gpu; move docs/gpu aside before each call (the tree and the carry are over the 64 MiB a call takes). Each call
# ends by ~570 s from its start and leaves one tarball in $OUT (a call's returned files are capped by count).
#   1: bash scripts/gpu/session29.sh first    scripts/gpu/exploits.py (the profiled call now inside the candidate's
#                                             first window, 75cba07, d85c303, d04847b: first time on a GPU), then
#                                             the cached sweep s29a (KBENCH_LANE_PRIORITY off) from a fresh state
#                                             (the store unpacked, no kept sizes or builds), in the background
#   2: bash scripts/gpu/session29.sh second   s29a waited for; the same fresh state; s29b (KBENCH_LANE_PRIORITY=1)
#   3: bash scripts/gpu/session29.sh third    s29b waited for; then the five rows that moved most between s28a and
#                                             s28b (L1/65, 71; L3/10, 29, 41) in two cached runs with one slot each:
#                                             do they repeat without other slots beside them?
# Read afterwards: scripts/analyze_sweep.py (the windows' gpu_pids, the lane), scripts/compare_sweeps.py (s29a
# against s29b: share verdicts now profiled in the window; the worst rows' two one-slot runs).
set -u -o pipefail
OUT=${OUT:-/tmp/out}
SECONDS=0
unpack() {
  rm -f .gpu/sweep.db
  gunzip -c .gpu/sweep.db.gz > .gpu/sweep.db && chmod u+w .gpu/sweep.db
}
fresh_sweep_state() {  # both sweeps start from the same store and with no kept sizes or builds
  rm -rf results/build_cache results/sweep.db results/sweep.db-journal
  unpack
}
left() { echo $(( ${1:-565} - SECONDS )); }
pack() { (cd "$OUT" && tar czf "$1.tgz" "$1" && rm -rf "$1"); }
case ${1:?first, second or third} in
  first)
    export KBENCH_SANDBOX_LAYERS=${KBENCH_SANDBOX_LAYERS:-netns,caps}
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    PYTHONPATH=/tmp/site:$PWD timeout ${T_EXPLOITS:-220} python3 scripts/gpu/exploits.py --out "$OUT/exploits.json" \
      > "$OUT/exploits.log" 2>&1; echo "exploits rc=$? ${SECONDS}s"; tail -40 "$OUT/exploits.log"
    fresh_sweep_state
    bash scripts/gpu/session21.sh start s29a && bash scripts/gpu/session21.sh wait s29a $(left 555)
    pack s29a ;;
  second)
    bash scripts/gpu/session21.sh wait s29a ${T_WAIT_A:-250} || exit
    mv "$OUT/s29a" "$OUT/s29a-end"; pack s29a-end
    fresh_sweep_state
    bash scripts/gpu/session21.sh start s29b KBENCH_LANE_PRIORITY=1 && bash scripts/gpu/session21.sh wait s29b $(left 555)
    pack s29b ;;
  third)
    bash scripts/gpu/session21.sh wait s29b ${T_WAIT_B:-250}
    mv "$OUT/s29b" "$OUT/s29b-end"; pack s29b-end
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD KBENCH_SANDBOX_LAYERS=${KBENCH_SANDBOX_LAYERS:-netns,caps}
    mkdir -p "$OUT/worst"
    for i in 1 2; do
      for spec in "3 10,29,41" "1 65,71"; do
        set -- $spec
        [ $(left 560) -gt 120 ] || { echo "worst L$1 run $i: skipped, ${SECONDS}s" | tee -a "$OUT/worst/session.log"; continue; }
        t=$(left 560); [ $t -gt 200 ] && t=200
        timeout $t python3 scripts/gpu/sweep.py --problems .data/kernelbench --out "$OUT/worst" --db results/sweep.db \
          --levels $1 --ids $2 --phase cached --tag worst-l$1-$i --gpus 0 --budget-s 150 >> "$OUT/worst/session.log" 2>&1
        echo "worst L$1 run $i: rc=$? ${SECONDS}s" | tee -a "$OUT/worst/session.log"
      done
    done
    for lv in 1 3; do
      python3 scripts/compare_sweeps.py --a results/sweep.db:sweep-cached-worst-l$lv-1 \
        --b results/sweep.db:sweep-cached-worst-l$lv-2 2>&1 | tee -a "$OUT/worst/compare.txt"
    done
    rm -f "$OUT/worst/sweep.db"; gzip -c results/sweep.db > "$OUT/worst/sweep.db.gz"
    pack worst ;;
esac
echo "call total: ${SECONDS}s"
