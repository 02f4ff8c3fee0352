#!/usr/bin/env bash
# H200 session 33 (planned in stop 39): issue 7's whole cold sweep in one measurement. All 250 level 1-3 problems, one
# Triton copy-kernel candidate each, six slots on the one GPU, from an empty store on a fresh machine (no baselines,
# no build cache, no torch.compile cache), in one run that outlasts a 600 s call: it runs in its own process session
# (scripts/gpu/session21.sh's way) and each later call on the same warm machine waits for it.
# Carry .whl and .data (level1-3 folders); move docs/gpu aside before each call; issue each call at once after the last.
#   1: bash scripts/gpu/session33.sh first   empty store, start sweep-cold-s33c in the background, wait ~550 s
#   2: bash scripts/gpu/session33.sh next    wait again (exit 3 at once on a fresh machine: the sweep went with the
#                                            last one); repeat until it prints "s33c done"
# Read afterwards: scripts/analyze_sweep.py --db <sweep.db> --run sweep-cold-s33c (wall from the run's row, phases,
# the warm-up's share). The cached sweep over the same store is session21.sh's (SWEEP_ONLY=sweep-cold-s33c).
set -u -o pipefail
OUT=${OUT:-/tmp/out}
SECONDS=0
pack() { (cd "$OUT" && tar czf "$1.tgz" "$1" && rm -rf "$1"); }
case ${1:?first or next} in
  first)
    ls -d .data/kernelbench/level1 .data/kernelbench/level2 .data/kernelbench/level3 > /dev/null || exit 2
    rm -rf results/build_cache results/sweep.db results/sweep.db-journal .gpu/sweep.db
    mkdir -p /tmp/bg/s33c
    env OUT=/tmp/bg/s33c PHASES=sweep SWEEP_LEVELS=1-3 SWEEP_PHASE=cold SWEEP_TAG=s33c SWEEP_GPUS=0,0,0,0,0,0 \
      T_SWEEP=${T_SWEEP:-2400} setsid nohup bash -c 'bash scripts/gpu/session9.sh > $OUT/driver.log 2>&1; date -u > $OUT/done' \
      > /dev/null 2>&1 < /dev/null &
    sleep 2
    bash scripts/gpu/session21.sh wait s33c $(( 555 - SECONDS ))
    pack s33c ;;
  next)
    bash scripts/gpu/session21.sh wait s33c ${T_WAIT:-550} || exit
    pack s33c ;;
esac
echo "call total: ${SECONDS}s"
