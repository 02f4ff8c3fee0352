"""Shared helpers for runner tests: small bundled runs on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def kbench(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the ``kbench`` CLI as a user would (``python -m kernelbench_harness``)."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([sys.executable, "-m", "kernelbench_harness", *args], cwd=cwd, env=e, text=True,
                       capture_output=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"kbench {' '.join(args)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "results").mkdir()
    return tmp_path
