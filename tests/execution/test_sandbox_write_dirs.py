"""``$KBENCH_SANDBOX_WRITE_DIRS``: folders a machine's GPU stack must write are added to Landlock's
allowed set (passed by the trusted side), and nothing else becomes writable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelbench_harness.execution.sandbox import landlock_abi, site_write_dirs

REPO = Path(__file__).resolve().parents[2]

CHILD = r'''
import json, os, sys
sys.path.insert(0, sys.argv[2])
from kernelbench_harness.execution.sandbox import SandboxConfig, apply_sandbox
cfg = json.loads(sys.argv[1])
applied = apply_sandbox(SandboxConfig(**cfg))
seen = {}
for name, path in (("private", cfg["private_dir"] + "/x"), ("extra", sys.argv[3] + "/x"), ("other", sys.argv[4] + "/x"),
                   ("own_proc", f"/proc/{os.getpid()}/comm")):
    try:
        with open(path, "w") as f:
            f.write("kbtest")
        seen[name] = "ok"
    except OSError as e:
        seen[name] = f"denied {e.errno}"
print(json.dumps({"applied": applied, "seen": seen}))
'''


def test_site_write_dirs_parses_commas_and_colons(monkeypatch):
    monkeypatch.setenv("KBENCH_SANDBOX_WRITE_DIRS", "/tmp/a, /proc/self:/run")
    assert site_write_dirs() == ("/tmp/a", "/proc/self", "/run")
    monkeypatch.delenv("KBENCH_SANDBOX_WRITE_DIRS")
    assert site_write_dirs() == ()


@pytest.mark.skipif(landlock_abi() < 1, reason="Landlock unavailable on this kernel")
def test_extra_write_dirs_are_writable_and_nothing_else(tmp_path):
    priv, extra, other = tmp_path / "priv", tmp_path / "extra", tmp_path / "other"
    for d in (priv, extra, other):
        d.mkdir()
    cfg = {"private_dir": str(priv), "extra_write_dirs": ["/proc/self", str(extra)], "new_netns": False,
           "landlock": True, "landlock_tcp": False, "landlock_scope": False, "drop_caps": False,
           "seccomp_unix": False}
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg), str(REPO), str(extra), str(other)],
                       capture_output=True, text=True, timeout=60)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert "fs-write-confined" in out["applied"]["landlock"]
    assert out["seen"]["private"] == "ok" and out["seen"]["extra"] == "ok" and out["seen"]["own_proc"] == "ok"
    assert out["seen"]["other"].startswith("denied")
    assert not (other / "x").exists()
