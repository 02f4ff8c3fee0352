"""Logical GPU indices map through an inherited CUDA_VISIBLE_DEVICES (issue 7).

On the H200 pair (2026-12-01) two runs started with CUDA_VISIBLE_DEVICES=0 and =1 both timed on
physical GPU 0: the device slot and the torch.compile warm-up pool set CUDA_VISIBLE_DEVICES to the
logical index itself, so long kernels measured twice their time. These tests run the real slot entry
point and the warm-up initialiser in fresh processes under a restricted CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kernelbench_harness.hardware import visible_device_id

SLOT = r"""
import os, sys
import kernelbench_harness.execution.device as d
class Stop(Exception):
    pass
class Stub:
    def __init__(self, dev, **kw):
        print("SEEN", os.environ["CUDA_VISIBLE_DEVICES"], dev, kw.get("physical_device"), flush=True)
        raise Stop
d.DeviceEvaluator = Stub
from kernelbench_harness.executors.local import _slot_main
try:
    _slot_main(None, sys.argv[1], {})
except Stop:
    pass
"""

WARM = r"""
import os, sys
from kernelbench_harness.execution import warm
warm._init(sys.argv[1], 1)
print("SEEN", os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
"""


def _run(code: str, arg: str, cvd: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if cvd is not None:
        env["CUDA_VISIBLE_DEVICES"] = cvd
    p = subprocess.run([sys.executable, "-c", code, arg], env=env, capture_output=True, text=True, timeout=120)
    seen = [ln for ln in p.stdout.splitlines() if ln.startswith("SEEN")]
    assert seen, p.stdout + p.stderr
    return seen[0]


@pytest.mark.parametrize("cvd,arg,want", [(None, "cuda:1", "1"), ("2,3", "cuda:0", "2"), ("2,3", "cuda:1", "3"),
                                          ("GPU-aaaa,GPU-bbbb", "cuda:1", "GPU-bbbb")])
def test_slot_selects_the_runs_own_gpu(cvd, arg, want):
    assert _run(SLOT, arg, cvd).split()[1:] == [want, "cuda:0", arg]


@pytest.mark.parametrize("cvd,arg,want", [(None, "0", "0"), ("5", "0", "5"), ("4,6", "1", "6")])
def test_warm_pool_compiles_on_the_runs_own_gpu(cvd, arg, want):
    assert _run(WARM, arg, cvd).split()[1] == want


def test_mapping_rules():
    assert visible_device_id(0, "") == "0"  # empty: nothing inherited to map through
    assert visible_device_id("1", " 7 , 9 ") == "9"
    assert visible_device_id(0, "MIG-abc") == "MIG-abc"
    with pytest.raises(ValueError, match="not among"):
        visible_device_id(2, "0,1")


def test_the_host_probe_is_stored_but_does_not_split_the_hardware_hash() -> None:
    """Hosts of one generic ``cpu_model`` run a sweep's host work at different speeds (H200 session 20): the
    fingerprint says how fast its host was, and the baseline cache's key does not depend on it."""
    from kernelbench_harness.hardware import collect_fingerprint, hardware_fingerprint

    fp = collect_fingerprint("cpu")
    assert isinstance(fp["host_probe_ms"], float) and 0 < fp["host_probe_ms"] < 10_000
    assert hardware_fingerprint({**fp, "host_probe_ms": fp["host_probe_ms"] * 3}) == fp["hardware_fingerprint"]


def test_the_runs_host_probe_is_the_least_loaded_slots() -> None:
    from types import SimpleNamespace

    from kernelbench_harness.executors.base import Executor

    slots = [{"slot": i, "device": "cuda:0", "fingerprint": {"hardware_fingerprint": "hw", "host_probe_ms": ms}}
             for i, ms in enumerate([61.0, 30.5, 44.0])]
    fp = Executor.fingerprint(SimpleNamespace(slots=slots))  # type: ignore[arg-type]
    assert fp["host_probe_ms"] == 30.5 and [s["host_probe_ms"] for s in fp["slots"]] == [61.0, 30.5, 44.0]
