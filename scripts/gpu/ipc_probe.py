"""Probe: can a sandboxed candidate process share CUDA memory with the trusted process (CUDA IPC)?

Run on a GPU machine from the repository root: ``python3 scripts/gpu/ipc_probe.py``. For each sandbox
layer set it starts a fresh child process that applies the layers, opens the parent's tensor through
its IPC handle, checks and changes its values, and shares a tensor of its own back; the parent checks
both directions and times a device-to-device copy through the shared mapping. Prints one JSON line
per layer set.
"""
from __future__ import annotations

import base64
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def child(layers: str) -> None:
    from kernelbench_harness.execution.sandbox import SandboxConfig, apply_sandbox
    on = set(filter(None, layers.split(",")))
    cfg = SandboxConfig(private_dir=f"/tmp/ipc_probe_{os.getpid()}", new_netns="netns" in on, landlock="landlock" in on,
                        landlock_tcp=False, landlock_scope=False, drop_caps="caps" in on,
                        seccomp_unix="seccomp" in on)
    applied = apply_sandbox(cfg)
    import torch
    from torch.multiprocessing.reductions import reduce_tensor
    msg = pickle.loads(base64.b64decode(sys.stdin.readline()))
    out: dict = {"applied": applied}
    try:
        x = msg[0](*msg[1])
        torch.cuda.synchronize()
        out["in_ok"] = bool((x[:1000] == torch.arange(1000, device=x.device, dtype=x.dtype)).all())
        t0 = time.perf_counter()
        mine = x.clone()
        torch.cuda.synchronize()
        out["clone_in_s"] = time.perf_counter() - t0
        x[:10].fill_(-1.0)
        torch.cuda.synchronize()
        y = mine * 2
        del x
        fn, args = reduce_tensor(y)
        out["out"] = base64.b64encode(pickle.dumps((fn, args))).decode()
    except Exception as e:  # noqa: BLE001
        out["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out), flush=True)
    sys.stdin.readline()  # keep y alive until the parent has read it


def parent() -> None:
    import torch
    from torch.multiprocessing.reductions import reduce_tensor
    from kernelbench_harness.execution.sandbox import make_undumpable
    make_undumpable()
    n = int(os.environ.get("IPC_N", str(1 << 30)))  # 4 GiB of float32
    x = torch.arange(n, device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    for layers in ("", "netns", "caps", "netns,caps", "netns,caps,seccomp"):
        x[:10] = torch.arange(10, device="cuda", dtype=torch.float32)
        torch.cuda.synchronize()
        fn, args = reduce_tensor(x)
        p = subprocess.Popen([sys.executable, __file__, "--child", layers], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        t0 = time.perf_counter()
        p.stdin.write(base64.b64encode(pickle.dumps((fn, args))).decode() + "\n")
        p.stdin.flush()
        line = p.stdout.readline()
        res: dict = {"layers": layers, "child_s": round(time.perf_counter() - t0, 3)}
        try:
            got = json.loads(line)
        except Exception:  # noqa: BLE001
            got = {"error": f"no reply: {line[:200]!r}"}
        res.update({k: v for k, v in got.items() if k != "out"})
        if "out" in got:
            try:
                f2, a2 = pickle.loads(base64.b64decode(got["out"]))
                y = f2(*a2)
                t1 = time.perf_counter()
                ycopy = y.clone()
                torch.cuda.synchronize()
                res["clone_out_s"] = round(time.perf_counter() - t1, 4)
                res["out_ok"] = bool(ycopy[12] == 24.0)
                res["parent_sees_child_write"] = bool(x[3].item() == -1.0)
                del y, ycopy
            except Exception as e:  # noqa: BLE001
                res["out_error"] = f"{type(e).__name__}: {e}"
        try:
            p.stdin.write("done\n")
            p.stdin.flush()
        except Exception:  # noqa: BLE001
            pass
        p.wait(timeout=60)
        res["rc"] = p.returncode
        res["GiB"] = round(n * 4 / 2**30, 2)
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2] if len(sys.argv) > 2 else "")
    else:
        parent()
