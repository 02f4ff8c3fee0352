"""A killed run's scratch folder is removed by the next run (tmpfs holds it in memory otherwise)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kernelbench_harness.execution.builder import BuildPool
from kernelbench_harness.execution.device import DeviceEvaluator
from kernelbench_harness.execution.scratch import sweep_stale_scratch

OWNER = r"""
import sys, time
from pathlib import Path
from kernelbench_harness.execution.scratch import claim_scratch
folder, fd = claim_scratch(Path(sys.argv[1]), sys.argv[2])
(folder / "inputs.bin").write_bytes(b"x" * 4096)
print(folder, flush=True)
time.sleep(600)
"""


def _owner(base: Path, prefix: str) -> tuple[subprocess.Popen, Path]:
    p = subprocess.Popen([sys.executable, "-c", OWNER, str(base), prefix], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    assert line, "owner process printed no folder"
    return p, Path(line)


def test_next_evaluator_removes_only_folders_of_dead_owners(tmp_path):
    live, live_dir = _owner(tmp_path, "kbdev_")
    dead, dead_dir = _owner(tmp_path, "kbdev_")
    other, other_dir = _owner(tmp_path, "kbbuild_")  # another kind: not swept by a device evaluator
    legacy = tmp_path / "kbdev_legacy"  # no owner file (older version, or being created): left alone
    legacy.mkdir()
    try:
        os.kill(dead.pid, signal.SIGKILL)
        dead.wait(timeout=30)
        os.kill(other.pid, signal.SIGKILL)
        other.wait(timeout=30)
        assert dead_dir.exists()
        ev = DeviceEvaluator("cpu", scratch_dir=tmp_path, sandbox=False)
        try:
            assert not dead_dir.exists()
            assert live_dir.exists() and (live_dir / "inputs.bin").exists()
            assert legacy.exists() and other_dir.exists()
            assert ev.scratch.exists() and ev.scratch != live_dir
            # a second evaluator beside it does not take this one's folder either
            ev2 = DeviceEvaluator("cpu", scratch_dir=tmp_path, sandbox=False)
            assert ev.scratch.exists()
            ev2.close()
        finally:
            ev.close()
        assert not ev.scratch.exists()
        pool = BuildPool(tmp_path / "cache", workers=1, scratch_dir=tmp_path, sandbox=False)
        try:
            assert not other_dir.exists()  # the build pool sweeps its own kind
            assert live_dir.exists()
        finally:
            pool.close()
    finally:
        live.kill()
        live.wait(timeout=30)
    assert sweep_stale_scratch(tmp_path, "kbdev_") == [live_dir]
