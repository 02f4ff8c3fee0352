#!/usr/bin/env bash
# GPU session 1, run from the repository root on the device machine (see scripts/gpu/README.md):
#   1. the bundled suite, every solution variant (Triton, CUDA C++, C++), as a smoke test;
#   2. issue 2's level-1 run: the 99 replayed kernelsseum-v0 level-1 candidates.
# Needs .whl/ (sqlalchemy, alembic, mako, greenlet, tenacity for Python 3.12) and .data/ (copies of
# ../shared/kernelsseum-v0) carried. Writes logs and the results DB to $OUT; analysis runs elsewhere
# (scripts/compare_reported.py), so no device time is spent on it.
set -u
OUT=${OUT:-/tmp/kbench-out}
mkdir -p "$OUT" results
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
KB="python3 -m kernelbench_harness"
DB=results/gpu.db
finish() { cp -f $DB "$OUT/" 2>/dev/null; }
trap finish EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv
  python3 -c "import torch,triton,sys;print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__)"
  nproc; uname -r; } 2>&1 | tee "$OUT/env.txt"
SECONDS=0
timeout ${T_BUNDLED:-150} $KB run --model bundled -O variant=all --run-name gpu-bundled --db $DB --display plain \
  --no-report 2>&1 | tail -40 > "$OUT/bundled.log"
echo "bundled: ${SECONDS}s" | tee -a "$OUT/env.txt"
timeout ${T_L1:-400} $KB run --model replay:.data/kernelsseum-v0/generations.jsonl \
  --problems .data/kernelsseum-v0/problems --level 1 --run-name kernelsseum-l1 --db $DB --display plain \
  --no-report 2>&1 | tee "$OUT/l1.log" | tail -5
echo "total: ${SECONDS}s" | tee -a "$OUT/env.txt"
