#!/usr/bin/env bash
# GPU session 2 (repository root on the device machine): issue 2's level-1 replay run, restricted by
# $IDS to what fits the remaining device time, with a consistent copy of the results DB left in $OUT.
# Carries .whl/ and .data/ like session1.sh. Session 1 showed Landlock stops CUDA from initialising
# in candidate processes on this machine (error 304) while an empty network namespace does not, so
# the sandbox probe is told to try that set first.
set -u
OUT=${OUT:-/tmp/kbench-out}
mkdir -p "$OUT" results
export PYTHONUNBUFFERED=1 KBENCH_SANDBOX_LAYERS=netns,caps,seccomp
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
DB=results/gpu2.db
backup() { python3 -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()" $DB "$OUT/gpu2.db"; }
trap backup EXIT
SECONDS=0
timeout ${T_L1:-400} python3 -m kernelbench_harness run --model replay:.data/kernelsseum-v0/generations.jsonl \
  --problems .data/kernelsseum-v0/problems --level 1 --ids "${IDS:-1-25}" --run-name kernelsseum-l1 --db $DB \
  --display plain --no-report --warm-workers 8 --build-workers 12 2>&1 | grep -v -i "warn" | tee "$OUT/l1.log" | tail -8
echo "total: ${SECONDS}s"
