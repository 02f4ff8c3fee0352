#!/usr/bin/env bash
# Session 9 (2026-12-01): phases by $PHASES, each under its own time limit; the sweep's store travels
# between calls as .gpu/sweep.db (copy $OUT/sweep.db there after each call).
#   check     scripts/gpu/devshare_check.py (shared buffers after stop 16's review)
#   exploits  scripts/gpu/exploits.py (the GPU exploit suite with stop 16's checks)
#   hostload  scripts/gpu/host_load.py (do host-bound timings follow the load on the other CPUs?)
#   sweep2    a second sweep (SWEEP2_* variables, T_SWEEP2 seconds)
#   cached2   the cached sweep over the level-2 problems done cold, per CACHED_CONFIGS
#   sweep     (the time left of $T_TOTAL, default 560 s) scripts/gpu/sweep.py --levels $SWEEP_LEVELS --phase $SWEEP_PHASE --tag $SWEEP_TAG
#             (and $SWEEP_SAMPLES: candidates per problem)
#             (SWEEP_ONLY=RUN: only the problems correct in that run, e.g. a cached run over what the cold one finished;
#             SWEEP_KERNEL=cuda: the copy kernel through load_inline, built once, instead of Triton)
set -u -o pipefail
OUT=${OUT:-/tmp/kbench-out}
mkdir -p "$OUT" results
export PYTHONUNBUFFERED=1 KBENCH_SANDBOX_LAYERS=${KBENCH_SANDBOX_LAYERS:-landlock,netns,caps}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
[ -f results/sweep.db ] || { [ -f .gpu/sweep.db ] && cp .gpu/sweep.db results/sweep.db && chmod u+w results/sweep.db; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv,noheader
  python3 -c "import torch,triton,sys;print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__)"
  git log --oneline -1; nproc; echo "KBENCH_START_OFF_HOLD=${KBENCH_START_OFF_HOLD:-} KBENCH_COMPILE_OFF_HOLD=${KBENCH_COMPILE_OFF_HOLD:-} KBENCH_LANE_PRIORITY=${KBENCH_LANE_PRIORITY:-} KBENCH_LANE_EXCLUSIVE=${KBENCH_LANE_EXCLUSIVE:-}"; } >> "$OUT/session.log" 2>&1
# every 20 s: who holds or waits for the device's host lock (/proc/locks); after 60 s with a waiter,
# the holders' Python stacks (the warm-up pool registers SIGUSR1 with faulthandler) go to the run's log
lockwatch() {
  local n=0
  while sleep 20; do
    for f in /tmp/kbench-locks/*.lock; do
      [ -e "$f" ] || continue
      ino=$(stat -c %i "$f")
      lines=$(grep ":$ino " /proc/locks)
      [ -n "$lines" ] || continue
      echo "$(date -u +%T) $f"; echo "$lines"
      if echo "$lines" | grep -q -- "->"; then n=$((n + 1)); else n=0; fi
      if [ $n -ge 3 ]; then
        for pid in $(echo "$lines" | grep -v -- "->" | awk '{print $5}' | sort -u); do
          echo "holder $pid: $(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | cut -c1-160)"; kill -USR1 $pid 2>/dev/null
        done
        n=0
      fi
    done
  done >> "$OUT/locks.log" 2>&1
}
lockwatch &
WATCH=$!
trap 'kill $WATCH 2>/dev/null' EXIT
SECONDS=0
for phase in ${PHASES//,/ }; do
  t0=$SECONDS
  echo "=== $phase $(date -u +%T)" >> "$OUT/session.log"
  case $phase in
    check) timeout ${T_CHECK:-90} python3 scripts/gpu/devshare_check.py > "$OUT/devshare_check.json" 2>> "$OUT/session.log" ;;
    exploits) timeout ${T_EXPLOITS:-200} python3 scripts/gpu/exploits.py --out "$OUT/exploits.json" >> "$OUT/session.log" 2>&1 ;;
    hostload) timeout ${T_HOSTLOAD:-150} python3 scripts/gpu/host_load.py --problems .data/kernelsseum-v0/problems \
        --out "$OUT/host_load.json" --ids ${HOSTLOAD_IDS:-3,4,5} --procs ${HOSTLOAD_PROCS:-3} >> "$OUT/session.log" 2>&1 ;;
    sweep) T_SWEEP=${T_SWEEP:-$(( ${T_TOTAL:-560} - SECONDS - 45 ))}  # or as given
      timeout $(( T_SWEEP + 60 )) python3 scripts/gpu/sweep.py --problems .data/kernelbench --out "$OUT" \
        --db results/sweep.db --levels ${SWEEP_LEVELS:-1-3} --phase ${SWEEP_PHASE:-cold} ${SWEEP_TAG:+--tag $SWEEP_TAG} \
        ${SWEEP_IDS:+--ids $SWEEP_IDS} ${SWEEP_GPUS:+--gpus $SWEEP_GPUS} ${SWEEP_ONLY:+--only-correct-in $SWEEP_ONLY} ${SWEEP_KERNEL:+--kernel $SWEEP_KERNEL} ${SWEEP_SAMPLES:+--samples $SWEEP_SAMPLES} \
        --budget-s $T_SWEEP >> "$OUT/session.log" 2>&1
      rc=$?; [ -f "$OUT/sweep_times.json" ] && mv "$OUT/sweep_times.json" "$OUT/sweep_times_${SWEEP_TAG:-sweep}.json"; (exit $rc) ;;
    sweep2) # a second sweep in the same call, from $SWEEP2_LEVELS, $SWEEP2_IDS, $SWEEP2_TAG, $SWEEP2_GPUS, $T_SWEEP2
      timeout $(( ${T_SWEEP2:-120} + 60 )) python3 scripts/gpu/sweep.py --problems .data/kernelbench --out "$OUT" \
        --db results/sweep.db --levels ${SWEEP2_LEVELS:-1} --phase cold --tag ${SWEEP2_TAG:-sweep2} \
        ${SWEEP2_IDS:+--ids $SWEEP2_IDS} ${SWEEP2_GPUS:+--gpus $SWEEP2_GPUS} --budget-s ${T_SWEEP2:-120} >> "$OUT/session.log" 2>&1
      rc=$?; [ -f "$OUT/sweep_times.json" ] && mv "$OUT/sweep_times.json" "$OUT/sweep_times_${SWEEP2_TAG:-sweep2}.json"; (exit $rc) ;;
    cached2)
      # the cached phase over the level-2 problems the cold run finished, once per configuration in
      # $CACHED_CONFIGS ("GPUS=TAG ...", default "0,0=2slots": two slots on the one GPU), each under
      # $T_CACHED seconds (default: what is left of $T_TOTAL); a finished run is not run again, so a new
      # configuration needs a new tag
      ids=$(python3 -c "import sqlite3;c=sqlite3.connect('results/sweep.db');print(','.join(str(r[0]) for r in c.execute(\"select distinct s.problem_id from samples s join runs r on r.id=s.run_id join attempts a on a.sample_pk=s.id join results x on x.attempt_pk=a.id where r.run_name='sweep-cold-l23' and s.level=2 and x.outcome='correct' order by 1\")))")
      echo "cached over level-2 ids: $ids" >> "$OUT/session.log"
      for cfg in ${CACHED_CONFIGS:-${CACHED_GPUS:-0,0}=${CACHED_TAG:-2slots}}; do
        left=$(( ${T_TOTAL:-560} - SECONDS - 45 ))
        T_C=${T_CACHED:-$left}; [ $T_C -gt $left ] && T_C=$left
        [ $T_C -lt 30 ] && { echo "cached ${cfg}: no time left" >> "$OUT/session.log"; continue; }
        echo "--- cached ${cfg} $(date -u +%T) budget ${T_C}s" >> "$OUT/session.log"
        [ -n "$ids" ] && timeout $(( T_C + 60 )) python3 scripts/gpu/sweep.py --problems .data/kernelbench --out "$OUT" \
          --db results/sweep.db --levels 2 --phase cached --tag l2-${cfg#*=} --ids "$ids" --gpus ${cfg%%=*} \
          --budget-s $T_C >> "$OUT/session.log" 2>&1
        [ -f "$OUT/sweep_times.json" ] && mv "$OUT/sweep_times.json" "$OUT/sweep_times_${cfg#*=}.json"
      done ;;
    *) echo "unknown phase $phase" >> "$OUT/session.log" ;;
  esac
  echo "$phase: rc=$? $((SECONDS - t0))s" >> "$OUT/session.log"
done
nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/session.log"
tail -60 "$OUT/session.log"
echo "total: ${SECONDS}s"
