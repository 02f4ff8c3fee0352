"""What NVML's sample buffers hold on this machine (H200 session 29: every timing window's ``gpu_between`` had
``n`` 0 SM clock samples, while power samples after the window's start came back).

    python3 scripts/gpu/nvml_samples_probe.py

For the SM clock (nvmlSamplingType_t 5) and total power (0): how many samples ``nvmlDeviceGetSamples`` returns
for a last-seen time of 0 (the whole buffer) and of the epoch time before a 1 s load, their value type and
first and last timestamps, beside ``time.time()`` and ``CLOCK_BOOTTIME`` in microseconds (which clock do the
timestamps follow?). Uses the harness's own ``NvmlProbe`` for the library and the device handle.
"""
from __future__ import annotations

import ctypes
import json
import time

import torch

from kernelbench_harness.hardware import NvmlProbe


def main() -> None:
    probe = NvmlProbe(str(getattr(torch.cuda.get_device_properties(0), "uuid", "") or ""))
    lib, handle = probe._lib, probe.handle
    assert handle is not None, "no NVML"

    class Value(ctypes.Union):
        _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                    ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                    ("usVal", ctypes.c_ushort)]

    class Sample(ctypes.Structure):
        _fields_ = [("timeStamp", ctypes.c_ulonglong), ("sampleValue", Value)]

    def read(kind: int, since: int) -> dict:
        vtype, count = ctypes.c_int(-1), ctypes.c_uint(0)
        rc0 = lib.nvmlDeviceGetSamples(handle, ctypes.c_int(kind), ctypes.c_ulonglong(since), ctypes.byref(vtype),
                                       ctypes.byref(count), None)
        n = int(count.value)
        out = {"kind": kind, "since_us": since, "rc_size": rc0, "count": n}
        if n:
            buf = (Sample * n)()
            count = ctypes.c_uint(n)
            rc = lib.nvmlDeviceGetSamples(handle, ctypes.c_int(kind), ctypes.c_ulonglong(since), ctypes.byref(vtype),
                                          ctypes.byref(count), buf)
            got = list(buf[: int(count.value)])
            field = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(vtype.value)
            out.update(rc=rc, filled=len(got), vtype=vtype.value,
                       first_ts=got[0].timeStamp if got else None, last_ts=got[-1].timeStamp if got else None,
                       values=[float(getattr(s.sampleValue, field)) for s in got[-8:]] if field else None,
                       ts_tail=[s.timeStamp for s in got[-8:]])
        return out

    def clocks() -> dict:
        return {"epoch_us": int(time.time() * 1e6),
                "boottime_us": int(time.clock_gettime(time.CLOCK_BOOTTIME) * 1e6),
                "monotonic_us": int(time.monotonic() * 1e6)}

    report = {"before": clocks(), "sm_all": read(5, 0), "power_all": read(0, 0)}
    t0 = time.time()
    a = torch.randn(8192, 8192, device="cuda")
    end = time.time() + 1.0
    while time.time() < end:
        a = a @ a
        a = a / a.norm()
    torch.cuda.synchronize()
    since = int(t0 * 1e6)
    report.update(after=clocks(), sm_since=read(5, since), power_since=read(0, since), sm_all2=read(5, 0),
                  window=probe.window_samples(t0), pids=probe.active_pids(t0))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
