"""The host-wide device lock is a fair reader-writer lock: torch.compile warm-ups (shared holders) may
overlap each other but never a timing window (exclusive), and a timing window is not starved by a
stream of overlapping warm-ups.

On an H200 the warm-up pool compiled and ran references on the GPU while the device slots already
timed other problems (each problem's timing starts when its own compile is done): the first baseline
of a run hit max_trials with samples from 0.055 to 0.10 ms for a 56 us kernel.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelbench_harness.execution import scratch
from kernelbench_harness.execution.scratch import HostDeviceLock, device_lock_key

# one process: holds the lock (shared or not) `count` times for `hold_s` each, `gap_s` apart, then
# prints its intervals (epochs taken inside the hold) as JSON; "held" once it first holds it
HOLDER = r"""
import json, sys, time
from pathlib import Path
from kernelbench_harness.execution.scratch import HostDeviceLock
key, folder, shared, hold_s, gap_s, until = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "1", *map(float, sys.argv[4:7])
start_at = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
lk = HostDeviceLock(key, folder)
time.sleep(max(0.0, start_at - time.time()))  # every holder begins together, however slowly each one started
spans, waits = [], []
while True:
    waits.append(lk.acquire(shared=shared))
    t0 = time.time()
    if len(spans) == 0:
        print("held", t0, flush=True)
    time.sleep(hold_s)
    t1 = time.time()
    lk.release()
    spans.append([t0, t1])
    if t1 >= until:
        break
    if gap_s:
        time.sleep(gap_s)
print(json.dumps({"spans": spans, "waits": waits}), flush=True)
"""


def _start(tmp_path: Path, shared: bool, hold_s: float, *, gap_s: float = 0.0, until: float = 0.0,
           key: str = "gpu-rw", start_at: float = 0.0) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLDER, key, str(tmp_path), "1" if shared else "0", str(hold_s),
                             str(gap_s), str(until), str(start_at)], stdout=subprocess.PIPE, text=True)


def _held(p: subprocess.Popen) -> float:
    line = p.stdout.readline()
    assert line.startswith("held"), line
    return float(line.split()[1])


def _result(p: subprocess.Popen) -> dict:
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_two_shared_holders_overlap(tmp_path):
    ps = [_start(tmp_path, True, 1.0) for _ in range(2)]
    for p in ps:
        _held(p)
    (a,), (b,) = (_result(p)["spans"] for p in ps)
    assert _overlap(a, b)
    assert min(a[1], b[1]) - max(a[0], b[0]) > 0.5  # both held it at once for most of the second


def test_an_exclusive_holder_never_overlaps_a_shared_one(tmp_path):
    # the 2 s of holds begin 3 s from now in every holder: on a loaded machine (CI beside other tests) a holder
    # that took over a second to start held the lock too few times before a shared end (seen in stop 39)
    start_at = time.time() + 3.0
    until = start_at + 2.0
    readers = [_start(tmp_path, True, 0.05, gap_s=0.01 * i, until=until, start_at=start_at) for i in range(2)]
    writers = [_start(tmp_path, False, 0.03, gap_s=0.15, until=until, start_at=start_at) for _ in range(2)]
    r0, r1 = (_result(p)["spans"] for p in readers)
    ws = [s for p in writers for s in _result(p)["spans"]]
    rs = r0 + r1
    assert len(ws) >= 6 and len(r0) >= 3 and len(r1) >= 3  # both kinds got the lock again and again
    for w in ws:
        assert not any(_overlap(w, r) for r in rs)
    ws.sort()
    assert all(x[1] <= y[0] for x, y in zip(ws, ws[1:]))  # nor two exclusive holders
    assert any(_overlap(a, b) for a in r0 for b in r1)  # while the shared holders did overlap


def test_a_timing_window_is_not_starved_by_overlapping_shared_holders(tmp_path):
    """Three warm-ups re-take the lock shared at once after each 50 ms hold, staggered so that one
    always holds it. With a plain flock (no turnstile) the exclusive acquirer below waits until they
    stop (4 s); with the turnstile it gets in after the current holds drain."""
    until = time.time() + 4.0
    readers = []
    for _ in range(3):
        readers.append(_start(tmp_path, True, 0.05, until=until))
        _held(readers[-1])
        time.sleep(0.017)
    try:
        time.sleep(0.2)
        lk = HostDeviceLock("gpu-rw", tmp_path)
        with lk.hold() as waited:
            t_in = time.time()
            time.sleep(0.1)
        assert waited < 2.0 and t_in < until - 1.0
        results = [_result(p) for p in readers]
    finally:
        for p in readers:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    spans = sorted(s for r in results for s in r["spans"])
    assert not any(_overlap([t_in, t_in + 0.1], s) for s in spans)
    assert any(s[0] > t_in for s in spans)  # the shared holders carried on afterwards


def test_a_killed_shared_holder_or_waiter_releases_the_lock(tmp_path):
    holder = _start(tmp_path, True, 600.0)
    _held(holder)
    # an exclusive waiter (holding the turnstile while it waits) killed: new shared holders get in
    waiter = _start(tmp_path, False, 600.0)
    time.sleep(0.5)
    assert waiter.poll() is None
    waiter.kill()
    waiter.wait(timeout=30)
    lk = HostDeviceLock("gpu-rw", tmp_path)
    assert lk.acquire(shared=True) < 5.0
    lk.release()
    # the shared holder killed: an exclusive acquirer gets in
    holder.kill()
    holder.wait(timeout=30)
    with lk.hold() as waited:
        assert waited < 5.0
    with pytest.raises(RuntimeError):  # one instance holds it once
        with lk.hold(shared=True):
            lk.acquire(shared=True)
    assert lk.acquire() < 5.0  # and released by the with block despite the error
    lk.release()


def test_device_lock_key(monkeypatch):
    import torch

    assert device_lock_key(torch.device("cpu")) is None
    assert device_lock_key("cpu") is None

    class Props:
        uuid = "GPU-1234-abcd"

    class NoUuid:
        uuid = ""
        pci_domain_id, pci_bus_id, pci_device_id = 0, 0x19, 0

    seen: list = []

    def fake(dev):
        seen.append(dev)
        return props

    monkeypatch.setattr(torch.cuda, "get_device_properties", fake)
    props = Props()
    assert device_lock_key("cuda:0") == "gpu-GPU-1234-abcd"
    props = NoUuid()
    assert device_lock_key(torch.device("cuda", 0)) == "gpu-pci-0-25-0"
    assert seen == [torch.device("cuda:0")] * 2


GOOD = '''
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2.0
def get_inputs():
    return [torch.rand(8)]
def get_init_inputs():
    return []
'''


def test_warm_one_on_the_cpu_takes_no_lock(tmp_path, monkeypatch):
    import tempfile

    import torch

    from kernelbench_harness.execution.warm import _warm_one

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(torch, "compile", lambda model, mode=None: model)  # no C++ compiler needed
    assert _warm_one(GOOD, "1_Good.py", "fp32", [], True, "cpu", 0) == {}
    out = _warm_one(GOOD, "1_Good.py", "fp32", ["default"], True, "cpu", 0)
    assert isinstance(out["default"], float) and "_lock_wait_s" not in out and "_gpu_windows" not in out
    assert not (tmp_path / "kbench-locks").exists()


def test_warm_one_on_a_gpu_waits_for_a_timing_window(tmp_path, monkeypatch):
    """No GPU here: moving the model to ``cuda:0`` fails, but only once the shared lock is held, after
    the timing window that held it exclusively; the wait and the GPU stretch are reported."""
    import tempfile

    from kernelbench_harness.execution.warm import _warm_one

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(scratch, "device_lock_key", lambda device: "gpu-fake")
    timing = HostDeviceLock("gpu-fake")
    timing.acquire()
    released: list[float] = []

    def end_window() -> None:
        released.append(time.time())
        timing.release()

    t = threading.Timer(0.5, end_window)
    t.start()
    try:
        out = _warm_one(GOOD, "1_Good.py", "fp32", ["default"], True, "cuda:0", 0)
    finally:
        t.join()
    assert "error" in out
    assert out["_lock_wait_s"] >= 0.4
    # the inputs drawn on the device, then (that failing) on the host: each stretch after the window ended
    windows = out["_gpu_windows"]
    assert 1 <= len(windows) <= 2 and all(released[0] <= start <= end for start, end in windows)
