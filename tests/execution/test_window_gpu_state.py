"""Every timing window records the GPU's clocks, power and clock-event reasons as it began and ended.

Between two runs on one H200 (2026-12-01) the eager time of short problems moved by 5-20% while each
run's confidence interval was within 1%; windows that began with the GPU at idle clocks are one
suspect. The window's record has to carry that evidence.
"""

from __future__ import annotations

import itertools

from kernelbench_harness.execution.device import DeviceEvaluator
from kernelbench_harness.hardware import NvmlProbe


class _FakeProbe:
    def __init__(self) -> None:
        self.clock = itertools.count(345, 1635)  # idle clocks, then boost

    def sample(self) -> dict:
        return {"sm_mhz": next(self.clock), "mem_mhz": 3201, "temp_c": 37, "power_w": 99.5, "reasons": 1}


def test_a_window_records_the_device_state_at_its_start_and_end(tmp_path):
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "s", sandbox=False)
    try:
        with ev.timing_window("eager") as w:
            pass
        assert "gpu_start" not in w  # a CPU device has no NVML probe
        probe = _FakeProbe()
        ev._nvml_probe = lambda: probe  # as on a CUDA device whose NVML answers
        with ev.timing_window("eager") as w:
            pass
        assert w["gpu_start"]["sm_mhz"] == 345 and w["gpu_end"]["sm_mhz"] == 1980
        assert w["gpu_start"]["reasons"] == 1 and w["end"] >= w["start"]
    finally:
        ev.close()


def test_a_probe_without_nvml_or_device_samples_nothing():
    # this machine has no NVIDIA driver; an unknown UUID resolves to no device where it has one
    assert NvmlProbe("").sample() is None
    assert NvmlProbe("00000000-0000-0000-0000-000000000000").sample() is None
