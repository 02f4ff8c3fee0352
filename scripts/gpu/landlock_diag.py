#!/usr/bin/env python3
"""Which sandbox layer stops CUDA from initialising on this machine, and which folder Landlock must allow.

On the H200 machines of 2026-11 every Landlock layer set, and the seccomp filter that refuses new
``AF_UNIX`` sockets, made ``cudaGetDeviceCount`` fail in candidate processes (error 304), so
candidates ran without filesystem write confinement. This script starts one fresh process per
variant: it applies kbench's own ``apply_sandbox`` with that variant, then initialises CUDA and sums
a tensor. A variant that passes with an extra folder tells what to put in
``$KBENCH_SANDBOX_WRITE_DIRS`` (the device probe then keeps Landlock on).

    python3 scripts/gpu/landlock_diag.py [--out diag.json]       # ~1 minute on a GPU machine

Needs only torch and this package. Prints one line per variant.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r'''
import json, sys
sys.path.insert(0, sys.argv[2])
cfg = json.loads(sys.argv[1])
from kernelbench_harness.execution.sandbox import SandboxConfig, apply_sandbox
import torch
applied = apply_sandbox(SandboxConfig(**cfg))
try:
    torch.cuda.init()
    ok = float(torch.ones(4, device="cuda").sum().item()) == 4.0
    print(json.dumps({"ok": ok, "applied": applied}))
except Exception as e:
    print(json.dumps({"ok": False, "applied": applied, "error": f"{type(e).__name__}: {e}"[:300]}))
'''

OFF = {"new_netns": False, "landlock": False, "landlock_tcp": False, "landlock_scope": False, "drop_caps": False,
       "seccomp_unix": False}
EXTRA = ("/tmp", "/proc/self", "/proc", "/dev/shm", "/run", "/var", "/sys", "/root", "/home")


def variants() -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = [("nothing", {})]
    out += [("netns", {"new_netns": True}), ("caps", {"drop_caps": True}), ("seccomp_unix", {"seccomp_unix": True})]
    ll = {"landlock": True}
    out.append(("landlock fs only", ll))
    for d in EXTRA:
        out.append((f"landlock fs + {d}", {**ll, "extra_write_dirs": [d]}))
    out.append(("landlock fs + all of " + ",".join(EXTRA), {**ll, "extra_write_dirs": list(EXTRA)}))
    out.append(("landlock fs + tcp", {**ll, "landlock_tcp": True, "extra_write_dirs": list(EXTRA)}))
    out.append(("landlock fs + signal scope", {**ll, "landlock_scope": True, "extra_write_dirs": list(EXTRA)}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    rows = []
    for name, layers in variants():
        priv = tempfile.mkdtemp(prefix="kbdiag_")
        cfg = {"private_dir": priv, **OFF, **layers}
        t0 = time.monotonic()
        try:
            p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg), str(REPO)], capture_output=True,
                               text=True, timeout=120)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            res = json.loads(lines[-1]) if lines else {"ok": False, "error": (p.stderr or p.stdout)[-300:]}
        except subprocess.TimeoutExpired:
            res = {"ok": False, "error": "timeout"}
        res.update({"variant": name, "wall_s": round(time.monotonic() - t0, 1)})
        rows.append(res)
        print(f"{'ok  ' if res.get('ok') else 'FAIL'} {name:60s} {res.get('error', '')[:120]}", flush=True)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
