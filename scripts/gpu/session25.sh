#!/usr/bin/env bash
# H200 session 25 (2026-12-03), the calls as run (carry .whl, .data, .gpu; see scripts/gpu/README.md):
#   1-2: bash scripts/gpu/session21.sh start s25a && bash scripts/gpu/session21.sh wait s25a 560
#        bash scripts/gpu/session21.sh wait s25a 250
#   3:   bash scripts/gpu/session21.sh start s25b && bash scripts/gpu/session21.sh wait s25b 570
#   4:   scripts/gpu/exploits.py (KBENCH_SANDBOX_LAYERS=netns,caps) on a fresh machine
#   5:   bash scripts/gpu/session25.sh firstjob   (two cached sweeps cut after 45 s each, one after the other on one
#        machine: the first sizes the problems and keeps the sizes, the second should start no sizing child; the
#        first job's start after each run's row is read from the store with scripts/large_jobs_timeline.py)
set -u -o pipefail
case ${1:-firstjob} in
  firstjob)
    base=${OUT:-/tmp/out}
    for t in s25c s25d; do
      mkdir -p "$base/$t"
      OUT=$base/$t PHASES=sweep SWEEP_LEVELS=1-3 SWEEP_PHASE=cached SWEEP_TAG=$t SWEEP_GPUS=0,0,0,0,0,0 \
        SWEEP_ONLY=sweep-cold-l23,sweep-cold-l1,sweep-cold-l1big,sweep-cold-l1rest,sweep-cold-big,sweep-cold-big2,sweep-cold-rest-l1,sweep-cold-rest-l3,sweep-cold-rest-l3b \
        T_SWEEP=${T_FIRSTJOB:-45} bash scripts/gpu/session9.sh > "$base/$t/driver.log" 2>&1
      tail -3 "$base/$t/session.log"
    done
    cp results/build_cache/sizes-v*.json "$base/" 2>/dev/null; ls -la results/build_cache | head -5 ;;
esac
