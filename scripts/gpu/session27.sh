#!/usr/bin/env bash
# H200 session 27 (2026-12-04), the calls as run (carry .whl, .data, .gpu; see scripts/gpu/README.md):
#   1: bash scripts/gpu/session27.sh sweep    the stores unpacked; the cached sweep of levels 1-3 (s27a, one sample
#                                             each, stop 33's start-up: sizes kept as lower bounds, the background
#                                             sizing child, the build pool's fork server awaited at the first build)
#                                             started in the background (session21.sh), waited for up to 560 s
#   2: bash scripts/gpu/session27.sh repeat   s27a waited for to its end, then issue 3's repeatability: the same 20
#                                             level-1 candidates in two runs under kbench (session3.sh's repeat)
#   3: bash scripts/gpu/session27.sh exploits; bash scripts/gpu/session27.sh share
#                                             on a fresh machine, with the custom-kernel share (attack C) merged:
#                                             scripts/gpu/exploits.py, then one kbench run of the same 20 real
#                                             level-1 candidates (their shares: does an honest one fall below 1%?)
#   5: bash scripts/gpu/session27.sh hostbound  on a fresh machine: three runs (A builds, B and C find the builds) of
#                                             the 7 candidates of L1/2, 3, 4, 5 and 12 (the host-bound rows of calls
#                                             2 and 4 and one GPU-bound control): B against C is a pair without builds
set -u -o pipefail
OUT=${OUT:-/tmp/out}
unpack() {
  [ -f .gpu/sweep.db ] || { gunzip -c .gpu/sweep.db.gz > .gpu/sweep.db && chmod u+w .gpu/sweep.db; }
  [ -f .gpu/gpu3.db ] || { gunzip -c .gpu/gpu3.db.gz > .gpu/gpu3.db && chmod u+w .gpu/gpu3.db; }
}
case ${1:?sweep, repeat or exploits} in
  sweep)
    unpack
    bash scripts/gpu/session21.sh start s27a && bash scripts/gpu/session21.sh wait s27a ${T_WAIT:-560} ;;
  repeat)
    unpack
    bash scripts/gpu/session21.sh wait s27a ${T_WAIT:-200}
    mkdir -p "$OUT/repeat"
    OUT=$OUT/repeat PHASES=repeat REPEAT_PROTOCOLS=${REPEAT_PROTOCOLS:-kbench} T_REPEAT=${T_REPEAT:-420} \
      bash scripts/gpu/session3.sh > "$OUT/repeat/driver.log" 2>&1
    rm -f "$OUT/repeat/gpu3.db"; tail -20 "$OUT/repeat/session.log" ;;
  exploits)
    export KBENCH_SANDBOX_LAYERS=${KBENCH_SANDBOX_LAYERS:-netns,caps}
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    PYTHONPATH=/tmp/site:$PWD timeout ${T_EXPLOITS:-300} python3 scripts/gpu/exploits.py --out "$OUT/exploits.json" \
      > "$OUT/exploits.log" 2>&1; echo "rc=$?"; tail -40 "$OUT/exploits.log" ;;
  hostbound)
    unpack
    mkdir -p "$OUT/hb"
    OUT=$OUT/hb PHASES=repeat REPEAT_PROTOCOLS=kbench REPEAT_N=3 REPEAT_TAG=hb REPEAT_IDS=2,3,4,5,12 \
      T_REPEAT=${T_REPEAT:-200} bash scripts/gpu/session3.sh > "$OUT/hb/driver.log" 2>&1
    rm -f "$OUT/hb/gpu3.db"; tail -3 "$OUT/hb/session.log" ;;
  share)
    unpack
    mkdir -p "$OUT/share"
    OUT=$OUT/share PHASES=repeat REPEAT_PROTOCOLS=kbench REPEAT_N=1 REPEAT_TAG=share T_REPEAT=${T_REPEAT:-300} \
      SKIP_WHEELS=1 bash scripts/gpu/session3.sh > "$OUT/share/driver.log" 2>&1
    rm -f "$OUT/share/gpu3.db"; tail -5 "$OUT/share/session.log" ;;
esac
