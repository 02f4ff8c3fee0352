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


def test_a_window_records_the_cpu_its_timing_process_ran_on(tmp_path):
    """Host-bound times sat on two levels up to 2.4x apart in different processes on a quiet H200 host
    (session 27): each window says which CPU (and NUMA node, where the host tells) the timing process ran on."""
    import os
    import subprocess
    import sys
    import time

    import pytest

    from kernelbench_harness.hardware import last_cpu

    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs: the candidate's process and this one pinned apart")
    mine, theirs = allowed[0], allowed[-1]
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "s", sandbox=False)
    child = subprocess.Popen([sys.executable, "-c",
                              f"import os, time; os.sched_setaffinity(0, {{{theirs}}}); time.sleep(30)"])
    try:
        os.sched_setaffinity(0, {mine})
        with ev.timing_window("eager") as w:
            pass
        assert w["timer_cpu"] == [mine, mine]  # no pid: this process times
        for _ in range(300):  # the child pins itself and sleeps there
            if os.sched_getaffinity(child.pid) == {theirs} and last_cpu(child.pid) == theirs:
                break
            time.sleep(0.01)
        with ev.timing_window("candidate", child.pid) as w:
            pass
        assert w["timer_cpu"] == [theirs, theirs]  # the candidate's process, not the trusted one
        assert "gpu_node" not in w  # a CPU device has no PCI function
        child.kill()
        child.wait()
        with ev.timing_window("candidate", child.pid) as w:
            pass
        assert "timer_cpu" not in w  # gone before the window began: nothing to say, nothing raised
    finally:
        os.sched_setaffinity(0, allowed)
        child.kill()
        ev.close()


def test_last_cpu_reads_the_field_after_a_command_name_with_spaces(tmp_path, monkeypatch):
    from kernelbench_harness import hardware

    fields = ["S"] + [str(i) for i in range(4, 39)] + ["7"] + ["0"] * 10  # field 39 (processor) = 7
    line = "1234 (a b) c)) " + " ".join(fields)
    real_open = open

    def fake_open(path, *a, **k):
        if str(path) == "/proc/4242/stat":
            p = tmp_path / "stat"
            p.write_text(line)
            return real_open(p, *a, **k)
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", fake_open)
    assert hardware.last_cpu(4242) == 7


class _FakeNvml:
    """``nvmlDeviceGetProcessUtilization`` as the driver answers it: the sample count first (a buffer too small),
    then the samples; ``rc`` forces a return code."""

    def __init__(self, samples, rc=None):
        self.samples, self.rc, self.asked_since = samples, rc, []

    def nvmlDeviceGetProcessUtilization(self, handle, buf, count_ref, since):
        self.asked_since.append(since.value)
        count = count_ref._obj
        if self.rc is not None:
            return self.rc
        if not self.samples:
            return 6  # NVML_ERROR_NOT_FOUND: no samples since then
        if buf is None or count.value < len(self.samples):
            count.value = len(self.samples)
            return 7  # NVML_ERROR_INSUFFICIENT_SIZE
        for i, (pid, ts, sm) in enumerate(self.samples):
            buf[i].pid, buf[i].timeStamp, buf[i].smUtil = pid, ts, sm
        count.value = len(self.samples)
        return 0


def _probe_with(lib) -> NvmlProbe:
    probe = NvmlProbe.__new__(NvmlProbe)
    probe.handle, probe._lib = object(), lib
    return probe


def test_active_pids_are_the_processes_on_the_sms_since_the_windows_start():
    """Two sweeps of the same candidates timed L3/10 at 11.2 and 20.1 ms, and one window's samples moved between
    the two levels in stretches (H200 session 28): each window now says which processes NVML saw on the SMs."""
    start_s = 1_800_000_000.25
    t0 = int(start_s * 1e6)
    lib = _FakeNvml([(101, t0 + 5, 90), (101, t0 + 9, 95), (202, t0 + 7, 40), (303, t0 + 8, 0),
                     (404, t0 - 10, 99)])  # 303 idle throughout; 404's sample is from before the window
    assert _probe_with(lib).active_pids(start_s) == {101: 95, 202: 40}
    assert lib.asked_since == [t0, t0]
    assert _probe_with(_FakeNvml([])).active_pids(start_s) == {}  # nobody on the SMs
    assert _probe_with(_FakeNvml([(1, t0, 5)], rc=3)).active_pids(start_s) is None  # not supported: unknown
    assert _probe_with(object()).active_pids(start_s) is None  # an NVML without the call
    assert NvmlProbe("").active_pids(start_s) is None  # no device


def test_a_window_records_the_processes_nvml_saw(tmp_path):
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "s", sandbox=False)
    try:
        probe = _FakeProbe()
        probe.active_pids = lambda since_s: {202: 40, 101: 95}
        ev._nvml_probe = lambda: probe
        with ev.timing_window("candidate") as w:
            pass
        assert w["gpu_pids"] == {"101": 95, "202": 40}
        probe.active_pids = lambda since_s: None  # NVML cannot say: nothing recorded
        with ev.timing_window("candidate") as w:
            pass
        assert "gpu_pids" not in w
    finally:
        ev.close()


class _FakeSamplesNvml:
    """``nvmlDeviceGetSamples`` as the driver answers it: with no buffer, how many samples there are; then the
    samples of the type asked for (SM clock: type 5, MHz as unsigned ints; power: type 0, milliwatts)."""

    def __init__(self, by_kind, rc=0, capacity=None):
        self.by_kind, self.rc, self.capacity = by_kind, rc, capacity

    def nvmlDeviceGetSamples(self, handle, kind, since, vtype_ref, count_ref, buf):
        if self.rc:
            return self.rc
        rows = [r for r in self.by_kind.get(kind.value, []) if r[0] > since.value]
        vtype_ref._obj.value = 1  # unsigned int
        count = count_ref._obj
        if buf is None and self.capacity:  # session 29's driver: the buffer's size, samples or not
            count.value = self.capacity
            return 0
        if not rows:
            return 6  # NVML_ERROR_NOT_FOUND
        if buf is None:
            count.value = len(rows)
            return 0
        for i, (ts, v) in enumerate(rows[: count.value]):
            buf[i].timeStamp, buf[i].sampleValue.uiVal = ts, v
        count.value = min(count.value, len(rows))
        return 0


def test_window_samples_are_the_sm_clock_and_power_between_the_windows_ends():
    """A dip in the SM clock inside a window, which the start and end samples miss, shows in ``gpu_between``."""
    start_s = 1_800_000_000.5
    t0 = int(start_s * 1e6)
    lib = _FakeSamplesNvml({5: [(t0 - 5, 345), (t0 + 10, 1980), (t0 + 20, 1410), (t0 + 30, 1980)],
                            0: [(t0 + 10, 512000), (t0 + 20, 699500)]})
    got = _probe_with(lib).window_samples(start_s)
    assert got == {"n": 3, "sm_mhz_min": 1410.0, "sm_mhz_max": 1980.0, "power_n": 2,
                   "power_w_max": 699.5}  # 345 was before
    # clock samples kept, none in this window: n is 0
    kept = _FakeSamplesNvml({5: [(t0 - 5, 1980)], 0: [(t0 + 10, 512000)]})
    assert _probe_with(kept).window_samples(start_s) == {
        "n": 0, "sm_mhz_min": None, "sm_mhz_max": None, "power_n": 1, "power_w_max": 512.0}
    # H200 session 29: the driver kept power samples and never a clock sample: n is None, not "none in the window"
    power_only = _FakeSamplesNvml({0: [(t0 - 30, 80000), (t0 + 10, 695700)]}, capacity=100)
    assert _probe_with(power_only).window_samples(start_s) == {
        "n": None, "sm_mhz_min": None, "sm_mhz_max": None, "power_n": 1, "power_w_max": 695.7}
    assert _probe_with(_FakeSamplesNvml({}, rc=3)).window_samples(start_s) is None  # not supported
    assert _probe_with(object()).window_samples(start_s) is None and NvmlProbe("").window_samples(start_s) is None


def test_window_samples_learn_that_the_driver_keeps_clock_samples_once_one_shows():
    """A window with no clock sample before the driver had taken any (a fresh process, a failed call) does not
    make every later empty window say the driver keeps none: n was None for them for the rest of the run."""
    start_s = 1_800_000_000.5
    t0 = int(start_s * 1e6)
    lib = _FakeSamplesNvml({0: [(t0 + 10, 512000)]})
    probe = _probe_with(lib)
    assert probe.window_samples(start_s)["n"] is None  # none kept so far
    lib.by_kind[5] = [(t0 + 20, 1980)]  # the driver's first clock sample
    assert probe.window_samples(start_s)["n"] == 1
    assert probe.window_samples(start_s + 1.0)["n"] == 0  # kept, none in this later window

    class _FailsOnce(_FakeSamplesNvml):  # the "any kept?" call fails once
        failed = False

        def nvmlDeviceGetSamples(self, handle, kind, since, vtype_ref, count_ref, buf):
            if kind.value == 5 and since.value == 0 and not self.failed:
                self.failed = True
                return 999  # NVML_ERROR_UNKNOWN
            return super().nvmlDeviceGetSamples(handle, kind, since, vtype_ref, count_ref, buf)

    probe = _probe_with(_FailsOnce({5: [(t0 - 5, 1980)], 0: [(t0 + 10, 512000)]}))
    probe.window_samples(start_s)
    assert probe.window_samples(start_s)["n"] == 0


def test_a_window_records_what_nvml_sampled_in_between(tmp_path):
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "s", sandbox=False)
    try:
        probe = _FakeProbe()
        between = {"n": 3, "sm_mhz_min": 1410.0, "sm_mhz_max": 1980.0, "power_w_max": 699.5}
        probe.window_samples = lambda since_s: between
        ev._nvml_probe = lambda: probe
        with ev.timing_window("candidate") as w:
            pass
        assert w["gpu_between"] == between
        probe.window_samples = lambda since_s: None
        with ev.timing_window("candidate") as w:
            pass
        assert "gpu_between" not in w
    finally:
        ev.close()
