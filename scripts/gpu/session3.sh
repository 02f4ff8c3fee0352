#!/usr/bin/env bash
# GPU session 3 (repository root on the device machine). One store, phases chosen by $PHASES
# (comma-separated, run in this order), each held to its own time limit so one call ends inside the
# device tool's 10 minutes; a phase cut short by its limit continues (`--resume`) in the next call:
#   replay    kernelsseum-v0 levels 1-3, every replayed candidate (issues 2 and 6), run "kernelsseum"
#   bundled   the bundled suite, every solution variant (issue 6's leaderboard)
#   startup   scripts/gpu/startup_costs.py: a fresh process's CUDA context, profiler and watch costs
#   diag      scripts/gpu/landlock_diag.py: which sandbox layer stops CUDA here (about 1 minute)
#   exploits  scripts/gpu/exploits.py, the GPU-only exploit kinds (issue 4)
#   repeat    scripts/gpu/repeatability.py: 20 level-1 candidates, kbench and kernelbench protocols,
#             each in its own store (issue 3); REPEAT_PROTOCOLS=kbench:hide_launch=true times with the
#             launch hidden (settings after a colon, '+' between them)
#   repeatpar the same on two GPUs at once: kbench's runs A and B on GPU 0, kernelbench's on GPU 1
#   drift     scripts/gpu/timing_drift.py: short kernels' eager times window to window and process to
#             process, timer settings before and after the time-based warm-up (issue 3)
#   ncu       scripts/gpu/ncu_fidelity.py: kbench's time next to Nsight Compute's (issue 3)
#   launch    scripts/gpu/launch_bound.py: single-call, launch-hidden and back-to-back times of short eager
#             problems in fresh processes (issue 3; about 2 minutes)
#   sweep     scripts/gpu/sweep.py over KernelBench levels 1-3 (issue 7)
# Needs .whl/ (sqlalchemy, greenlet, alembic, mako, tenacity for Python 3.12) and .data/ (copies of
# ../shared/kernelsseum-v0 and ../shared/kernelbench/level1-3) carried; .gpu/ may carry the store
# from an earlier call (used when the machine was given back in between). Everything that comes
# back is written to $OUT; the analysis runs elsewhere (no device time).
set -u -o pipefail
OUT=${OUT:-/tmp/kbench-out}
PHASES=${PHASES:-replay}
mkdir -p "$OUT" results
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 KBENCH_SANDBOX_LAYERS=${KBENCH_SANDBOX_LAYERS:-landlock,netns,caps}
[ -n "${SKIP_WHEELS:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
KB="python3 -m kernelbench_harness"
DB=results/gpu3.db
[ -f $DB ] || { [ -f .gpu/gpu3.db ] && cp .gpu/gpu3.db $DB && echo "store restored from .gpu/"; }
backup() {
  python3 - "$DB" "$OUT/gpu3.db" <<'EOF'
import sqlite3, sys, os
if os.path.exists(sys.argv[1]):
    s = sqlite3.connect(sys.argv[1]); d = sqlite3.connect(sys.argv[2]); s.backup(d); d.close()
EOF
}
trap backup EXIT
has_run() { python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); sys.exit(0 if c.execute('select 1 from runs where run_name=?',(sys.argv[2],)).fetchone() else 1)" $DB "$1" 2>/dev/null; }
resume_flag() { has_run "$1" && echo --resume; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  python3 -c "import torch,triton,sys;print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__)"
  nproc; } >> "$OUT/session.log" 2>&1
SECONDS=0
for phase in ${PHASES//,/ }; do
  t0=$SECONDS
  echo "=== $phase $(date -u +%T)" >> "$OUT/session.log"
  case $phase in
    replay)
      timeout ${T_REPLAY:-540} $KB run --model replay:.data/kernelsseum-v0/generations.jsonl \
        --problems .data/kernelsseum-v0/problems --level 1-3 ${IDS:+--ids $IDS} --run-name kernelsseum $(resume_flag kernelsseum) \
        --db $DB --display plain --no-report ${GPUS:+--gpus $GPUS} --warm-workers ${WARM:-6} --build-workers ${BUILDS:-12} \
        2>&1 | grep -v -i "warn" >> "$OUT/session.log" ;;
    bundled)
      timeout ${T_BUNDLED:-120} $KB run --model bundled -O variant=all --run-name bundled $(resume_flag bundled) \
        --db $DB --display plain --no-report 2>&1 | grep -v -i "warn" >> "$OUT/session.log" ;;
    startup)
      timeout ${T_STARTUP:-120} python3 scripts/gpu/startup_costs.py --repeat 3 >> "$OUT/session.log" 2>&1 ;;
    diag)
      timeout ${T_DIAG:-120} python3 scripts/gpu/landlock_diag.py >> "$OUT/session.log" 2>&1 ;;
    exploits)
      timeout ${T_EXPLOITS:-150} python3 scripts/gpu/exploits.py --out "$OUT/exploits.json" ${EXPLOITS_ONLY:+--only $EXPLOITS_ONLY} ${EXPLOITS_P:+-P $EXPLOITS_P} >> "$OUT/session.log" 2>&1 ;;
    fid)
      # a few candidates in their own run (the ncu phase reads it): also shows whether the device slots
      # load the build pool's binaries (build phase ~0 s in the slot) on this machine
      env | grep -i -E "arch_list|cuda_home" >> "$OUT/session.log"
      timeout ${T_FID:-150} $KB run --model replay:${FID_GENS:-.data/fid.jsonl} --problems .data/kernelsseum-v0/problems \
        --level 1 --ids ${FID_IDS:-1,2,3,5,7} --run-name fid $(resume_flag fid) --db $DB --display plain --no-report --warm-workers 5 \
        2>&1 | grep -v -i "warn" >> "$OUT/session.log" ;;
    repeat)
      timeout ${T_REPEAT:-300} python3 scripts/gpu/repeatability.py --store $DB --run kernelsseum \
        --generations .data/kernelsseum-v0/generations.jsonl --problems .data/kernelsseum-v0/problems \
        ${REPEAT_PROTOCOLS:+--protocols $REPEAT_PROTOCOLS} ${REPEAT_TAG:+--tag $REPEAT_TAG} ${REPEAT_N:+--repeats $REPEAT_N} ${REPEAT_IDS:+--ids $REPEAT_IDS} \
        ${REPEAT_ARGS:+--kbench-args="$REPEAT_ARGS"} --out "$OUT" >> "$OUT/session.log" 2>&1
      rc=$?
      # the runs' stores (raw samples, windows, clocks) for the analysis elsewhere
      mkdir -p "$OUT/repeat-dbs"
      for f in results/kbrepeat/*.db; do
        [ -f "$f" ] && python3 -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)" "$f" "$OUT/repeat-dbs/$(basename $f)"
      done
      gzip -f "$OUT"/repeat-dbs/*.db 2>/dev/null
      (exit $rc) ;;
    drift)
      timeout ${T_DRIFT:-120} python3 scripts/gpu/timing_drift.py --problems .data/kernelsseum-v0/problems \
        --out "$OUT/drift.json" --windows ${DRIFT_WINDOWS:-4} >> "$OUT/session.log" 2>&1 ;;
    launch)
      timeout ${T_LAUNCH:-240} python3 scripts/gpu/launch_bound.py --problems .data/kernelsseum-v0/problems \
        --out "$OUT/launch.json" --procs ${LAUNCH_PROCS:-5} >> "$OUT/session.log" 2>&1 ;;
    repeatpar)
      # two GPUs of one host: protocol kbench's runs A and B on GPU 0, kernelbench's on GPU 1, at the same
      # time, each run pair on one GPU inside one call, each half of the cores (so the slots' timing-core
      # pinning of one does not land on the other's cores)
      half=$(( $(nproc) / 2 ))
      i=0
      for proto in kbench kernelbench; do
        lo=$(( i * half )); hi=$(( lo + half - 1 ))
        CUDA_VISIBLE_DEVICES=$i timeout ${T_REPEAT:-300} taskset -c $lo-$hi python3 scripts/gpu/repeatability.py \
          --store $DB --run kernelsseum --generations .data/kernelsseum-v0/generations.jsonl \
          --problems .data/kernelsseum-v0/problems --protocols $proto --work results/kbrepeat-$proto \
          --out "$OUT/repeat-$proto" > "$OUT/repeat-$proto.log" 2>&1 &
        i=$(( i + 1 ))
      done
      wait
      tail -n 5 "$OUT"/repeat-*.log >> "$OUT/session.log" ;;
    ncu)
      timeout ${T_NCU:-90} python3 scripts/gpu/ncu_fidelity.py --store $DB --run ${NCU_RUN:-kernelsseum} \
        --generations .data/kernelsseum-v0/generations.jsonl --problems .data/kernelsseum-v0/problems \
        --out "$OUT/ncu.json" >> "$OUT/session.log" 2>&1 ;;
    sweep)
      timeout $(( ${T_SWEEP:-540} + 60 )) python3 scripts/gpu/sweep.py --problems .data/kernelbench --out "$OUT" \
        --phase ${SWEEP_PHASE:-both} --budget-s ${T_SWEEP:-540} ${SWEEP_LIMIT:+--limit $SWEEP_LIMIT} >> "$OUT/session.log" 2>&1 ;;
    *) echo "unknown phase $phase" ;;
  esac
  echo "$phase: rc=$? $((SECONDS - t0))s" | tee -a "$OUT/session.log"
done
tail -40 "$OUT/session.log"
echo "total: ${SECONDS}s"
