"""Check kbench's shared device buffers (kernelbench_harness.execution.devshare) on a GPU.

    python3 scripts/gpu/devshare_check.py [--layers netns,caps]

1. Poison: fill 64 MiB of torch memory with a pattern, free it and empty the cache, then allocate a
   SharedBuffer of the same size: it must hold 0xFF bytes only (the driver hands freed memory out again
   without clearing it).
2. Mapping: a fresh child process with the sandbox layers applied maps the buffer through its handle
   (devshare.open_shared), checks the values, writes into it, and the parent sees the write.
3. Granule: the buffer's capacity is a whole number of 2 MiB granules.
Prints one JSON object; exit status 0 when every check passes.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def child(handle: str, nbytes: int, layers: str) -> None:
    from kernelbench_harness.execution.sandbox import SandboxConfig, apply_sandbox

    on = set(filter(None, layers.split(",")))
    apply_sandbox(SandboxConfig(private_dir=f"/tmp/devshare_check_{os.getpid()}", new_netns="netns" in on,
                                landlock="landlock" in on, landlock_tcp=False, landlock_scope=False,
                                drop_caps="caps" in on, seccomp_unix="seccomp" in on))
    import torch

    from kernelbench_harness.execution import devshare

    t = devshare.open_shared(handle, nbytes, torch.device("cuda:0"))
    ok = bool((t[:4096] == 7).all())
    t[:16].fill_(9)
    torch.cuda.synchronize()
    print(json.dumps({"child_sees_values": ok}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="netns,caps")
    ap.add_argument("--child", nargs=2)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.layers)
        return 0
    import torch

    from kernelbench_harness.execution import devshare
    from kernelbench_harness.execution.sandbox import make_undumpable

    make_undumpable()
    dev = torch.device("cuda:0")
    n = 64 << 20
    out: dict = {}
    junk = torch.full((n,), 0x5A, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    del junk
    torch.cuda.empty_cache()
    buf = devshare.SharedBuffer(n, dev)
    out["poisoned"] = bool((buf.tensor == 0xFF).all())
    out["granules"] = buf.capacity % devshare.GRANULE == 0
    buf.tensor.fill_(7)
    torch.cuda.synchronize()
    p = subprocess.run([sys.executable, __file__, "--layers", args.layers, "--child", buf.handle, str(n)],
                       capture_output=True, text=True, timeout=120)
    try:
        out.update(json.loads(p.stdout.strip().splitlines()[-1]))
    except Exception:  # noqa: BLE001
        out["child_error"] = (p.stderr or p.stdout)[-1500:]
    out["parent_sees_write"] = bool((buf.tensor[:16] == 9).all())
    buf.free()
    print(json.dumps(out))
    return 0 if all(out.get(k) for k in ("poisoned", "granules", "child_sees_values", "parent_sees_write")) else 1


if __name__ == "__main__":
    sys.exit(main())
