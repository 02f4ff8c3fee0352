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


def test_site_write_dirs_parses_commas_and_colons(monkeypatch, tmp_path):
    monkeypatch.setenv("KBENCH_SANDBOX_WRITE_DIRS", f"{tmp_path}, /proc/self:/run")
    assert site_write_dirs() == (str(tmp_path), "/proc/self", "/run")
    assert site_write_dirs("cuda") == (str(tmp_path), "/proc/self", "/run")  # the variable wins on a GPU too
    for bad in ("proc/self", f"{tmp_path}/missing"):  # relative, or no such folder: refused by name
        monkeypatch.setenv("KBENCH_SANDBOX_WRITE_DIRS", f"/run,{bad}")
        with pytest.raises(ValueError, match="not an absolute path to an existing folder") as e:
            site_write_dirs("cuda")
        assert repr(bad) in str(e.value)
    monkeypatch.delenv("KBENCH_SANDBOX_WRITE_DIRS")
    assert site_write_dirs() == ()
    # a CUDA candidate may write its own /proc entry by default (CUDA does not start under Landlock without it on the
    # H200 machines); set but empty means nothing more
    assert site_write_dirs("cuda") == ("/proc/self",)
    monkeypatch.setenv("KBENCH_SANDBOX_WRITE_DIRS", "")
    assert site_write_dirs("cuda") == ()


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


SHM_CHILD = r'''
import json, os, sys
sys.path.insert(0, sys.argv[2])
from kernelbench_harness.execution.sandbox import SandboxConfig, apply_sandbox
cfg = json.loads(sys.argv[1])
root = sys.argv[3]
applied = apply_sandbox(SandboxConfig(**cfg))
seen = {}

def attempt(name, fn):
    try:
        fn()
        seen[name] = "ok"
    except OSError as e:
        seen[name] = f"denied {e.errno}"

def write(path):
    with open(path, "w") as f:
        f.write("kbtest")

victim = os.path.join(root, "p_1", "inputs", "set0_1.bin")
attempt("private", lambda: write(os.path.join(cfg["private_dir"], "x")))
attempt("unlink_sibling_input", lambda: os.unlink(victim))
attempt("replace_sibling_input", lambda: os.replace(os.path.join(cfg["private_dir"], "x"), victim))
attempt("new_file_in_scratch", lambda: write(os.path.join(root, "planted")))
attempt("new_file_in_dev_shm", lambda: write("/dev/shm/kbench-test-planted-" + str(os.getpid())))
attempt("dev_null", lambda: write("/dev/null"))
if len(sys.argv) > 4:  # a /dev folder where this user may create files outside the sandbox
    attempt("new_file_in_dev_folder", lambda: write(os.path.join(sys.argv[4], "kbench-test-planted")))
print(json.dumps({"applied": applied, "seen": seen}))
'''


def _a_dev_folder_one_may_write() -> str | None:
    """A folder in /dev (not shm or mqueue) where this process may create a file (outside any sandbox), or None."""
    import os

    for d in sorted(Path("/dev").iterdir()):
        if d.name in ("shm", "mqueue") or d.is_symlink() or not d.is_dir():
            continue
        probe = d / f"kbench-test-probe-{os.getpid()}"
        try:
            probe.write_text("")
            probe.unlink()
            return str(d)
        except OSError:
            continue
    return None


def test_dev_write_paths_are_character_devices_only() -> None:
    """No folder (a file created there outlived the candidate: /dev/cpu, /dev/net) and no block device (a disk)."""
    import os
    import stat as st

    from kernelbench_harness.execution.sandbox import dev_write_paths

    paths = dev_write_paths()
    assert "/dev/null" in paths
    for path in paths:
        mode = os.lstat(path).st_mode
        assert st.S_ISCHR(mode), path
        assert not path.startswith(("/dev/shm/", "/dev/mqueue/")), path


@pytest.mark.skipif(landlock_abi() < 1, reason="Landlock unavailable on this kernel")
@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_a_candidate_cannot_touch_the_runs_scratch_in_dev_shm_beside_its_own_folder() -> None:
    """The run's scratch lives in /dev/shm/kbench: a slot's problem folder (p_*/inputs, the input sets every later
    candidate of the problem reads) beside each candidate's private folder (j_*). Landlock allowed writes to all of
    /dev, so a candidate could unlink another candidate's input set and write its own in its place (the honest
    candidate after it, of another model, was then judged incorrect). Only its private folder and /dev's devices
    (/dev/null, the GPU's files) stay writable."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="kbench-test-", dir="/dev/shm"))
    try:
        priv = root / "j_1"
        priv.mkdir()
        (root / "p_1" / "inputs").mkdir(parents=True)
        victim = root / "p_1" / "inputs" / "set0_1.bin"
        victim.write_bytes(b"trusted")
        victim.chmod(0o444)
        cfg = {"private_dir": str(priv), "extra_write_dirs": [], "new_netns": False, "landlock": True,
               "landlock_tcp": False, "landlock_scope": False, "drop_caps": False, "seccomp_unix": False}
        dev_dir = _a_dev_folder_one_may_write()
        p = subprocess.run([sys.executable, "-c", SHM_CHILD, json.dumps(cfg), str(REPO), str(root),
                            *([dev_dir] if dev_dir else [])], capture_output=True, text=True, timeout=60)
        out = json.loads(p.stdout.strip().splitlines()[-1])
        assert "fs-write-confined" in out["applied"]["landlock"], out
        seen = out["seen"]
        assert seen["private"] == "ok" and seen["dev_null"] == "ok", seen
        for name in ("unlink_sibling_input", "replace_sibling_input", "new_file_in_scratch", "new_file_in_dev_shm",
                     *(["new_file_in_dev_folder"] if dev_dir else [])):
            assert seen[name].startswith("denied"), (name, seen)
        if dev_dir:  # a rule on the folder let a file there outlive the candidate (stop 39's second attack)
            assert not (Path(dev_dir) / "kbench-test-planted").exists()
        assert victim.read_bytes() == b"trusted"
        assert not (root / "planted").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        for stray in Path("/dev/shm").glob("kbench-test-planted-*"):
            stray.unlink()
        for stray in Path("/dev").glob("*/kbench-test-planted"):
            stray.unlink()
