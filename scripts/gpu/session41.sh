#!/usr/bin/env bash
# H200 session 41, calls 2-3 as run (docs/gpu/2026-12-05-s41/): a whole cached sweep (Triton copy kernel, six slots)
# from session 18's base store, in the background on one warm machine, with stops 39-41's checks.
#   2: bash scripts/gpu/session41.sh start   fresh sweep state, start s41c (T_SWEEP=470), wait up to 500 s
#   3: bash scripts/gpu/session41.sh wait    wait up to 150 s more (exit 3 at once on a fresh machine)
# Carry .whl, .data (level1-3 folders) and .gpu (sweep.db.gz); move docs/gpu aside first.
# Read afterwards: scripts/analyze_sweep.py --db <s41c's sweep.db> --run sweep-cached-s41c.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
case ${1:?start or wait} in
  start)
    rm -rf results/build_cache results/sweep.db results/sweep.db-journal .gpu/sweep.db
    gunzip -c .gpu/sweep.db.gz > .gpu/sweep.db && chmod u+w .gpu/sweep.db
    bash scripts/gpu/session21.sh start s41c T_SWEEP=470 && bash scripts/gpu/session21.sh wait s41c 500
    (cd "$OUT" && tar czf s41c.tgz s41c && rm -rf s41c) ;;
  wait)
    bash scripts/gpu/session21.sh wait s41c 150 || exit
    (cd "$OUT" && tar czf s41c-end.tgz s41c && rm -rf s41c) ;;
esac
