#!/usr/bin/env bash
# Session 9 (2026-12-01): phases by $PHASES, each under its own time limit; the sweep's store travels
# between calls as .gpu/sweep.db (copy $OUT/sweep.db there after each call).
#   check     scripts/gpu/devshare_check.py (shared buffers after stop 16's review)
#   exploits  scripts/gpu/exploits.py (the GPU exploit suite with stop 16's checks)
#   hostload  scripts/gpu/host_load.py (do host-bound timings follow the load on the other CPUs?)
#   sweep     (the time left of $T_TOTAL, default 560 s) scripts/gpu/sweep.py --levels $SWEEP_LEVELS --phase $SWEEP_PHASE --tag $SWEEP_TAG
set -u -o pipefail
OUT=${OUT:-/tmp/kbench-out}
mkdir -p "$OUT" results
export PYTHONUNBUFFERED=1 KBENCH_SANDBOX_LAYERS=${KBENCH_SANDBOX_LAYERS:-netns,caps}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
[ -f results/sweep.db ] || { [ -f .gpu/sweep.db ] && cp .gpu/sweep.db results/sweep.db; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv,noheader
  python3 -c "import torch,triton,sys;print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__)"
  git log --oneline -1; nproc; } >> "$OUT/session.log" 2>&1
SECONDS=0
for phase in ${PHASES//,/ }; do
  t0=$SECONDS
  echo "=== $phase $(date -u +%T)" >> "$OUT/session.log"
  case $phase in
    check) timeout ${T_CHECK:-90} python3 scripts/gpu/devshare_check.py > "$OUT/devshare_check.json" 2>> "$OUT/session.log" ;;
    exploits) timeout ${T_EXPLOITS:-200} python3 scripts/gpu/exploits.py --out "$OUT/exploits.json" >> "$OUT/session.log" 2>&1 ;;
    hostload) timeout ${T_HOSTLOAD:-150} python3 scripts/gpu/host_load.py --problems .data/kernelsseum-v0/problems \
        --out "$OUT/host_load.json" --ids ${HOSTLOAD_IDS:-3,4,5} --procs ${HOSTLOAD_PROCS:-3} >> "$OUT/session.log" 2>&1 ;;
    sweep) T_SWEEP=${T_SWEEP:-$(( ${T_TOTAL:-560} - SECONDS - 45 ))}
      timeout $(( T_SWEEP + 60 )) python3 scripts/gpu/sweep.py --problems .data/kernelbench --out "$OUT" \
        --db results/sweep.db --levels ${SWEEP_LEVELS:-1-3} --phase ${SWEEP_PHASE:-cold} ${SWEEP_TAG:+--tag $SWEEP_TAG} \
        ${SWEEP_IDS:+--ids $SWEEP_IDS} --budget-s $T_SWEEP >> "$OUT/session.log" 2>&1 ;;
    *) echo "unknown phase $phase" >> "$OUT/session.log" ;;
  esac
  echo "$phase: rc=$? $((SECONDS - t0))s" >> "$OUT/session.log"
done
nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$OUT/session.log"
tail -60 "$OUT/session.log"
echo "total: ${SECONDS}s"
