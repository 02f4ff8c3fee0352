#!/usr/bin/env bash
# H200 session 24 (2026-12-03), the calls as run (carry .whl, .data, .gpu; see scripts/gpu/README.md):
#   1-2: bash scripts/gpu/session21.sh start s24a KBENCH_LANE_PAIRS=1 && bash scripts/gpu/session21.sh wait s24a 560
#        bash scripts/gpu/session21.sh wait s24a 200
#   3-4: the same as s24b with KBENCH_LANE_PAIRS=0 (pairs in the lane were taken out again after this session: 7c62654)
#   5-6: bash scripts/gpu/session24.sh sizing   (one child against the default, 5; then 8, 5 and 12 children: call 6
#        ran the same as an inline script)
#        (call 5 then started a cached sweep, s24c, for 80 s to see when its first job started; see the README)
set -u -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
mkdir -p "${OUT:-/tmp/out}"
case ${1:-sizing} in
  sizing)
    python3 scripts/sizing_check.py --problems .data/kernelbench 2>&1 | tee "${OUT:-/tmp/out}/sizing.txt"
    python3 scripts/sizing_check.py --problems .data/kernelbench --settings 8,5,12 2>&1 \
      | tee "${OUT:-/tmp/out}/sizing_workers.txt" ;;
esac
