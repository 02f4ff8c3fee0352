#!/usr/bin/env bash
# H200 session 30, as planned in stop 37 (scripts/gpu/README.md's plan, items 4 and 5). Back to back on one machine;
# carry .whl, .data and .gpu (sweep.db.gz and gpu3.db.gz); move docs/gpu aside before each call. Each call ends by
# ~570 s from its start and leaves one tarball per folder in $OUT.
#   1: bash scripts/gpu/session30.sh first    the cached sweep s30k with the copy kernel through load_inline
#                                             (SWEEP_KERNEL=cuda: one source, built once by the build pool, no
#                                             Triton compile in each candidate's first call), lane priority on (the
#                                             default), from the same fresh state as s29a/s29b, in the background
#   2: bash scripts/gpu/session30.sh second   s30k waited for; then the host-bound rows of stop 36 (L1/2, 3, 4, 5, 12)
#                                             in two runs each of kbench and kbench:alternate_rounds=8 (baselines
#                                             measured live, candidate and eager blocks alternating): do the host-bound
#                                             speedups repeat when their blocks alternate?
# Read afterwards: scripts/analyze_sweep.py and scripts/compare_sweeps.py (s30k against s29b: wall, trial_call_first,
# verdicts), hb/repeat.json (repeatability.py's figures per protocol) and scripts/host_bound_places.py.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
SECONDS=0
unpack() {
  rm -f .gpu/sweep.db .gpu/gpu3.db
  gunzip -c .gpu/sweep.db.gz > .gpu/sweep.db && chmod u+w .gpu/sweep.db
  gunzip -c .gpu/gpu3.db.gz > .gpu/gpu3.db && chmod u+w .gpu/gpu3.db
}
left() { echo $(( ${1:-565} - SECONDS )); }
pack() { (cd "$OUT" && tar czf "$1.tgz" "$1" && rm -rf "$1"); }
case ${1:?first or second} in
  first)
    rm -rf results/build_cache results/sweep.db results/sweep.db-journal
    unpack
    bash scripts/gpu/session21.sh start s30k SWEEP_KERNEL=cuda && bash scripts/gpu/session21.sh wait s30k $(left 555)
    pack s30k ;;
  second)
    bash scripts/gpu/session21.sh wait s30k ${T_WAIT_K:-200} || exit
    mv "$OUT/s30k" "$OUT/s30k-end"; pack s30k-end
    unpack
    mkdir -p "$OUT/hb"
    OUT=$OUT/hb PHASES=repeat REPEAT_PROTOCOLS=kbench,kbench:alternate_rounds=8 REPEAT_N=2 REPEAT_TAG=alt \
      REPEAT_IDS=2,3,4,5,12 T_REPEAT=$(left 540) bash scripts/gpu/session3.sh > "$OUT/hb/driver.log" 2>&1
    rm -f "$OUT/hb/gpu3.db"; tail -5 "$OUT/hb/session.log"
    for f in results/kbrepeat/*alt*.db; do echo "== $f"; python3 scripts/host_bound_places.py --db "$f" --all; done \
      > "$OUT/hb/places.txt" 2>&1; head -60 "$OUT/hb/places.txt"
    pack hb ;;
esac
echo "call total: ${SECONDS}s"
