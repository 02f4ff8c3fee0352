"""``scripts/gpu/context_noise.py``'s churn: children counted only where they did what their condition says."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "context_noise", Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "context_noise.py")
context_noise = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(context_noise)  # type: ignore[union-attr]


def test_host_children_are_counted_in_the_blocks_they_ended_in_and_failed_ones_never() -> None:
    host = context_noise.Churn("host", 1, "cpu", 0.05)
    with host:
        t0 = time.time()
        time.sleep(1.0)
        t1 = time.time()
    assert host.ended_between(t0, t1) >= 3  # paced at 0.05 s: many in a second, however slow the fork
    assert host.ended_between(t1 + 3600, t1 + 7200) == 0
    # on a machine without CUDA every context child fails: none is counted as having made a context
    ctx = context_noise.Churn("context", 1, "cuda:0" if not _has_cuda() else "cuda:99", 0.05)
    with ctx:
        time.sleep(1.0)
    assert ctx.ends == []


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
