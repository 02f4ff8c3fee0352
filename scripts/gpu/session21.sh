#!/usr/bin/env bash
# Session 21 (2026-12-03): whole cached sweeps that outlast one 600 s device call. A sweep runs in its own
# process session (setsid), which a device call leaves running on a warm machine; a later call waits for it.
#   scripts/gpu/session21.sh start TAG [VAR=VALUE ...]   start scripts/gpu/session9.sh's cached sweep of levels 1-3
#       (the problems correct in the cold runs) as run TAG, with the given environment, writing to /tmp/bg/TAG
#   scripts/gpu/session21.sh wait TAG SECONDS             wait until it ends or SECONDS pass, then copy its folder
#       (less the stores) and results/sweep.db, gzipped, into $OUT/TAG; on a fresh machine exit 3 at once
#   scripts/gpu/session21.sh probe                        host_probe_ms, the user, and the compile-notice probe
set -u -o pipefail
cmd=$1; shift
case $cmd in
  probe)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
    id -u; nproc; python3 -c "from kernelbench_harness.hardware import host_probe_ms as h; print('host_probe_ms', h())"
    python3 scripts/gpu/compile_notice_probe.py ;;
  start)
    tag=$1; shift
    mkdir -p /tmp/bg/$tag
    env "$@" OUT=/tmp/bg/$tag PHASES=sweep SWEEP_LEVELS=1-3 SWEEP_PHASE=cached SWEEP_TAG=$tag SWEEP_GPUS=0,0,0,0,0,0 \
      SWEEP_ONLY=sweep-cold-l23,sweep-cold-l1,sweep-cold-l1big,sweep-cold-l1rest,sweep-cold-big,sweep-cold-big2,sweep-cold-rest-l1,sweep-cold-rest-l3,sweep-cold-rest-l3b \
      T_SWEEP=${T_SWEEP:-1000} setsid nohup bash -c 'bash scripts/gpu/session9.sh > $OUT/driver.log 2>&1; date -u > $OUT/done' \
      > /dev/null 2>&1 < /dev/null &
    sleep 2; echo "started $tag"; cat /tmp/bg/$tag/session.log 2>/dev/null ;;
  wait)
    tag=$1; limit=$2; t=0
    # a fresh machine (the last call ended more than idle_release_s ago) has no /tmp/bg: say so at once
    [ -d /tmp/bg/$tag ] || { echo "no /tmp/bg/$tag: this is a fresh machine, the sweep went with the last one"; exit 3; }
    while [ ! -f /tmp/bg/$tag/done ] && [ $t -lt $limit ]; do sleep 5; t=$((t + 5)); done
    [ -f /tmp/bg/$tag/done ] && echo "$tag done: $(cat /tmp/bg/$tag/done)" || echo "$tag still running after ${limit}s"
    mkdir -p "$OUT/$tag"; (cd /tmp/bg/$tag && find . -type f ! -name '*.db' -exec cp --parents {} "$OUT/$tag/" \;); gzip -c results/sweep.db > "$OUT/$tag/sweep.db.gz"
    tail -5 /tmp/bg/$tag/session.log ;;
esac
