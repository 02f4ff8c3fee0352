#!/usr/bin/env bash
# H200 session 41, call 4 (planned in stop 41): exploits.py with Landlock pinned on for GPU candidates, the process's own
# /proc entry writable (landlock_diag.py found CUDA starts so, session 41), and stop 41's process checks (the candidate's
# process a subreaper, live children ended and flagged, the channel's descriptor checked before each send).
# Expected: every verdict as in session 41's call 1 (32/32) plus helper-83's two cases, and each row's sandbox naming
# landlock. Carry .whl; move docs/gpu aside first. ~110 s of commands.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SECONDS=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KBENCH_SANDBOX_LAYERS=landlock,netns,caps KBENCH_SANDBOX_WRITE_DIRS=/proc/self
timeout 400 python3 scripts/gpu/exploits.py --out "$OUT/exploits_landlock.json" > "$OUT/exploits_landlock.log" 2>&1
echo "exploits rc=$? at ${SECONDS}s"
grep -E "as expected|UNEXPECTED" "$OUT/exploits_landlock.log" | tail -40
python3 - "$OUT/exploits_landlock.json" <<'PY'
import json, sys, collections
rows = json.load(open(sys.argv[1]))
rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
print("sandbox layer sets:", collections.Counter(json.dumps(r.get("sandbox"), sort_keys=True)[:160] for r in rows).most_common(4))
PY
echo "call total: ${SECONDS}s"
