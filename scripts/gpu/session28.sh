#!/usr/bin/env bash
# H200 session 28 (2026-12-04), the calls as run, back to back on one machine (carry .whl, .data, .gpu; see
# scripts/gpu/README.md). Each call ends by ~570 s from its start (the device's 600 s limit).
#   1: bash scripts/gpu/session28.sh first    scripts/gpu/cpu_probe.py on the quiet machine (does a host-bound
#                                             launch rate follow the CPU or the process?), scripts/gpu/exploits.py
#                                             (the share's review fixes, k20_profiled_raise), then the cached sweep
#                                             s28a (KBENCH_LANE_PRIORITY off) started in the background
#   2: bash scripts/gpu/session28.sh second   s28a waited for to its end; the store and the build cache (the kept
#                                             sizes) reset to what s28a started from; s28b (KBENCH_LANE_PRIORITY=1)
#   3: bash scripts/gpu/session28.sh third    s28b waited for to its end, then HB_RUNS runs of the host-bound rows
#                                             (L1/2, 3, 4, 5, 12) and scripts/host_bound_places.py over their stores
#   (as run: call 2 started s28b without the store, which the carry had replaced (fixed since); s28b ran in a third call:
#    `gunzip .gpu/sweep.db.gz; fresh state; session21.sh start s28b KBENCH_LANE_PRIORITY=1; wait s28b 565`)
#   4: bash scripts/gpu/session28.sh hostbound  on a fresh machine: cpu_probe.py --series (how long a launch-rate
#                                             level lasts), then HB_RUNS runs of the host-bound rows and their places
set -u -o pipefail
OUT=${OUT:-/tmp/out}
SECONDS=0
unpack() {
  [ -f .gpu/sweep.db ] || { gunzip -c .gpu/sweep.db.gz > .gpu/sweep.db && chmod u+w .gpu/sweep.db; }
  [ -f .gpu/gpu3.db ] || { gunzip -c .gpu/gpu3.db.gz > .gpu/gpu3.db && chmod u+w .gpu/gpu3.db; }
}
fresh_sweep_state() {  # both sweeps start from the same store and with no kept sizes or builds
  rm -rf results/build_cache results/sweep.db results/sweep.db-journal
}
left() { echo $(( ${1:-565} - SECONDS )); }
case ${1:?first, second or third} in
  first)
    unpack
    timeout 150 python3 scripts/gpu/cpu_probe.py --out "$OUT/cpu_probe.json" --processes ${PROBE_PROCS:-4} \
      > "$OUT/cpu_probe.txt" 2>&1; echo "probe rc=$? ${SECONDS}s"; cat "$OUT/cpu_probe.txt"
    { lscpu; numactl -H 2>/dev/null; nvidia-smi topo -m 2>/dev/null; } > "$OUT/topology.txt" 2>&1
    export KBENCH_SANDBOX_LAYERS=${KBENCH_SANDBOX_LAYERS:-netns,caps}
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    PYTHONPATH=/tmp/site:$PWD timeout ${T_EXPLOITS:-220} python3 scripts/gpu/exploits.py --out "$OUT/exploits.json" \
      > "$OUT/exploits.log" 2>&1; echo "exploits rc=$? ${SECONDS}s"; tail -40 "$OUT/exploits.log"
    fresh_sweep_state
    bash scripts/gpu/session21.sh start s28a && bash scripts/gpu/session21.sh wait s28a $(left) ;;
  second)
    bash scripts/gpu/session21.sh wait s28a ${T_WAIT_A:-250} || exit
    fresh_sweep_state
    rm -f .gpu/sweep.db; unpack  # (each call's carry replaces .gpu/: the unpacked store is gone)
    bash scripts/gpu/session21.sh start s28b KBENCH_LANE_PRIORITY=1 && bash scripts/gpu/session21.sh wait s28b $(left) ;;
  third|hostbound)
    unpack
    if [ "$1" = third ]; then bash scripts/gpu/session21.sh wait s28b ${T_WAIT_B:-250}
    else timeout 60 python3 scripts/gpu/cpu_probe.py --out "$OUT/cpu_series.json" --processes 2 --series 2 --ops 100 \
      > "$OUT/cpu_series.txt" 2>&1; cat "$OUT/cpu_series.txt"; fi
    mkdir -p "$OUT/hb"
    OUT=$OUT/hb PHASES=repeat REPEAT_PROTOCOLS=kbench REPEAT_N=${HB_RUNS:-2} REPEAT_TAG=hb REPEAT_IDS=2,3,4,5,12 \
      T_REPEAT=$(left 540) bash scripts/gpu/session3.sh > "$OUT/hb/driver.log" 2>&1
    rm -f "$OUT/hb/gpu3.db"; tail -5 "$OUT/hb/session.log"
    for f in results/kbrepeat/*hb*.db; do echo "== $f"; python3 scripts/host_bound_places.py --db "$f" --all; done \
      > "$OUT/hb/places.txt" 2>&1; cat "$OUT/hb/places.txt" | head -80 ;;
esac
echo "call total: ${SECONDS}s"
