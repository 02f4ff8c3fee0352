"""Hardware and software fingerprint stored with every timing.

``hardware_fingerprint`` identifies the device model (GPU name, memory, SM count, or CPU model);
``software_fingerprint`` the stack that produced a number (driver, CUDA, torch, triton, Python).
Baselines are reused only when both match exactly. Clocks are read with ``nvidia-smi`` at the start
and the end of a run (informational: they are not part of either fingerprint).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import time
from typing import Any

__all__ = ["collect_fingerprint", "host_probe_ms", "read_gpu_clocks", "hardware_fingerprint", "software_fingerprint",
           "RESUME_FIELDS", "planned_fingerprint", "fingerprint_differences"]


def visible_device_id(index: int | str, env: str | None = None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that selects logical GPU ``index`` of this process alone.

    Logical indices (``--gpus 0,1``, ``cuda:0``) count the GPUs this process sees. When the user, a
    cluster scheduler or Ray already restricted them (``CUDA_VISIBLE_DEVICES=2,3``), logical index 0
    is physical GPU 2: a worker must get ``"2"``, not ``"0"``, or it runs (and times) on a GPU that
    was not given to this run, possibly beside another run's timing.

    Args:
        index: logical GPU index (0-based), as an int or a digit string.
        env: the inherited ``CUDA_VISIBLE_DEVICES`` (default: this process's environment); entries
            may be indices, ``GPU-<uuid>`` or ``MIG-<uuid>`` strings.

    Returns:
        The entry to put in a child's ``CUDA_VISIBLE_DEVICES``.

    Raises:
        ValueError: ``index`` is beyond the visible GPUs.
    """
    i = int(index)
    env = os.environ.get("CUDA_VISIBLE_DEVICES") if env is None else env
    if env is None or not env.strip():
        return str(i)
    entries = [e.strip() for e in env.split(",") if e.strip()]
    if i < 0 or i >= len(entries):
        raise ValueError(f"GPU index {i} is not among CUDA_VISIBLE_DEVICES={env!r} ({len(entries)} visible)")
    return entries[i]


def _smi(query: str, index: int | str | None = None) -> list[str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    cmd = [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"]
    if index is not None:
        cmd.insert(1, f"--id={index}")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def read_gpu_clocks(index: int | None = None) -> list[dict[str, str]]:
    """SM and memory clocks (MHz), temperature and power per GPU from nvidia-smi ([] without it)."""
    rows = _smi("index,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,pstate", index)
    keys = ("index", "sm_mhz", "mem_mhz", "max_sm_mhz", "temp_c", "power_w", "pstate")
    return [dict(zip(keys, (c.strip() for c in r.split(",")))) for r in rows]


class NvmlProbe:
    """Reads one GPU's clocks, temperature, power and clock-event reasons through NVML (ctypes on
    ``libnvidia-ml.so.1``, no Python package), cheaply enough (tens of microseconds) to sample at the
    start and end of every timing window.

    Args:
        uuid: the GPU's UUID as torch reports it (``torch.cuda.get_device_properties(d).uuid``), with or
            without NVML's ``GPU-`` prefix.

    :meth:`sample` returns None when NVML or the device is not available (no driver, a CPU run, a MIG
    instance NVML does not resolve); nothing raises.
    """

    _lib: Any = None
    _ok: bool | None = None
    #: whether the driver keeps SM clock samples at all (:meth:`window_samples`); None: not known yet
    _sm_kept: bool | None = None

    def __init__(self, uuid: str) -> None:
        self.handle: Any = None
        lib = self._load()
        if lib is None or not uuid:
            return
        import ctypes

        for cand in (uuid, f"GPU-{uuid}", f"MIG-{uuid}"):
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByUUID(cand.encode(), ctypes.byref(h)) == 0:
                self.handle = h
                break

    @classmethod
    def _load(cls) -> Any:
        if cls._ok is None:
            cls._ok = False
            try:
                import ctypes

                lib = ctypes.CDLL("libnvidia-ml.so.1")
                if lib.nvmlInit_v2() == 0:
                    cls._lib, cls._ok = lib, True
            except (OSError, AttributeError):
                pass
        return cls._lib if cls._ok else None

    def sample(self) -> dict[str, Any] | None:
        """``{"sm_mhz", "mem_mhz", "temp_c", "power_w", "reasons"}`` now (``reasons``: NVML's bit mask
        of why clocks are held below the maximum, 0 = none; 1 = GPU idle, 4 = software power cap,
        0x20/0x40/0x80 = thermal or hardware slowdown), or None."""
        if self.handle is None:
            return None
        import ctypes

        lib = self._lib
        sm, mem, temp, mw = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
        reasons = ctypes.c_ulonglong()
        if lib.nvmlDeviceGetClockInfo(self.handle, 1, ctypes.byref(sm)) != 0:
            return None
        lib.nvmlDeviceGetClockInfo(self.handle, 2, ctypes.byref(mem))
        lib.nvmlDeviceGetTemperature(self.handle, 0, ctypes.byref(temp))
        lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(mw))
        fn = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons")
        fn(self.handle, ctypes.byref(reasons))
        return {"sm_mhz": sm.value, "mem_mhz": mem.value, "temp_c": temp.value,
                "power_w": round(mw.value / 1000.0, 1), "reasons": reasons.value}

    #: NVML's return codes read here: success, no samples since the time asked for, a buffer too small
    _NVML_SUCCESS, _NVML_NOT_FOUND, _NVML_INSUFFICIENT_SIZE = 0, 6, 7

    def active_pids(self, since_s: float) -> dict[int, int] | None:
        """The processes NVML saw using this GPU's SMs since ``since_s`` (seconds since the epoch, as
        ``time.time()``): ``{pid: highest SM utilisation in percent of its samples}``, from
        ``nvmlDeviceGetProcessUtilization`` (the driver samples each process's use every few tens to hundreds of
        milliseconds, so a sample can reach a little before ``since_s``). Processes with 0% in every sample are
        left out. ``{}``: no process used the SMs. None: NVML cannot say (no driver, a CPU run, a GPU or
        driver without per-process samples).

        The pids are NVML's, the host's: inside a container they are not the container's own. A timing window
        that had the device to itself shows at most its own two processes (the candidate's, which times, and the
        slot's, which stages input sets and calibrates the launch-hiding spin in it); more mean another process's
        kernels ran during the window (a sample covers the driver's last sample period, so it can reach back a
        little before the window) (H200 session 28: one window's samples of L3/10 moved between
        about 11 and 18-20 ms in stretches)."""
        if self.handle is None:
            return None
        import ctypes

        class Sample(ctypes.Structure):  # nvmlProcessUtilizationSample_t
            _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                        ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]

        fn = getattr(self._lib, "nvmlDeviceGetProcessUtilization", None)
        if fn is None:
            return None
        since_us = ctypes.c_ulonglong(max(0, int(since_s * 1e6)))
        # (room for a process that starts between the two calls)
        got = self._sized_call(lambda buf, count: fn(self.handle, buf, count, since_us), Sample, spare=16)
        if got is None:
            return None
        out: dict[int, int] = {}
        for smp in got:
            if smp.smUtil > 0 and smp.timeStamp >= since_us.value:
                out[int(smp.pid)] = max(out.get(int(smp.pid), 0), int(smp.smUtil))
        return out

    def _sized_call(self, call: Any, struct: Any, spare: int = 0) -> list[Any] | None:
        """NVML's two-call protocol for a buffer of ``struct``: ``call(None, count)`` asks how many records there
        are, ``call(buf, count)`` fills them (``count``: a ``ctypes.byref`` of an unsigned int; ``spare`` extra
        records allocated). Returns the records filled (``[]``: none, NVML's not-found), or None where NVML
        answers with an error."""
        import ctypes

        count = ctypes.c_uint(0)
        rc = call(None, ctypes.byref(count))
        if rc == self._NVML_NOT_FOUND:
            return []
        if rc not in (self._NVML_SUCCESS, self._NVML_INSUFFICIENT_SIZE):
            return None
        n = max(0, min(int(count.value), 4096))
        if n == 0:
            return []
        n += spare
        buf = (struct * n)()
        count = ctypes.c_uint(n)
        rc = call(buf, ctypes.byref(count))
        if rc == self._NVML_NOT_FOUND:
            return []
        if rc != self._NVML_SUCCESS:
            return None
        return list(buf[: min(n, int(count.value))])

    #: ``nvmlSamplingType_t`` values read here, and the sample value types (``nvmlValueType_t``) they come in
    _SM_CLOCK_SAMPLES, _POWER_SAMPLES = 5, 0
    _VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

    def _samples(self, kind: int, since_us: int) -> list[float] | None:
        """NVML's buffered samples of ``kind`` taken after ``since_us`` (``nvmlDeviceGetSamples``), or None."""
        import ctypes

        class Value(ctypes.Union):  # nvmlValue_t
            _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                        ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                        ("usVal", ctypes.c_ushort)]

        class Sample(ctypes.Structure):  # nvmlSample_t
            _fields_ = [("timeStamp", ctypes.c_ulonglong), ("sampleValue", Value)]

        fn = getattr(self._lib, "nvmlDeviceGetSamples", None)
        if fn is None:
            return None
        vtype = ctypes.c_int(0)
        since = ctypes.c_ulonglong(since_us)
        got = self._sized_call(lambda buf, count: fn(self.handle, ctypes.c_int(kind), since, ctypes.byref(vtype),
                                                     count, buf), Sample)
        if not got:
            return got
        field = self._VALUE_FIELDS.get(int(vtype.value))
        if field is None:
            return None
        return [float(getattr(smp.sampleValue, field)) for smp in got if smp.timeStamp > since_us]

    def window_samples(self, since_s: float) -> dict[str, Any] | None:
        """The SM clock and the power NVML sampled since ``since_s`` (seconds since the epoch, as ``time.time()``;
        the driver keeps a short buffer of samples): ``{"n", "sm_mhz_min", "sm_mhz_max", "power_n",
        "power_w_max"}`` (``n`` and ``power_n``: the samples of each in the window; the others None without
        samples), or None where NVML cannot say. ``n`` is None where the driver keeps no SM clock samples at
        all: on H200 session 29's machine (driver 580.159, a virtual machine) its clock buffer was always empty,
        while it kept about 120 power samples 20 ms apart (so ``power_w_max`` covers only a window's last
        ~2.4 s). A window's start and end samples (:meth:`sample`) miss a dip in between: H200 session 28 saw
        one window's samples of L3/10 move between about 11 and 18-20 ms in stretches, with full clocks at its
        two ends (session 29: the host paced that candidate; see ``device.host_bound_callables``)."""
        if self.handle is None:
            return None
        since_us = max(0, int(since_s * 1e6))
        clocks = self._samples(self._SM_CLOCK_SAMPLES, since_us)
        if clocks is None:
            return None
        if clocks:  # the driver keeps them (it may have kept none yet when an earlier window asked)
            self._sm_kept = True
        elif self._sm_kept is None:  # none in the window: does the driver keep any?
            kept = self._samples(self._SM_CLOCK_SAMPLES, 0)
            if kept is not None:  # an NVML error says nothing about the driver: asked again next time
                self._sm_kept = bool(kept)
        power = self._samples(self._POWER_SAMPLES, since_us) or []
        return {"n": len(clocks) if clocks or self._sm_kept else None,
                "sm_mhz_min": min(clocks) if clocks else None, "sm_mhz_max": max(clocks) if clocks else None,
                "power_n": len(power), "power_w_max": round(max(power) / 1000.0, 1) if power else None}


def last_cpu(pid: int | None = None) -> int | None:
    """The CPU a process's main thread last ran on (``/proc/<pid>/stat``'s 39th field, ``processor``), or
    None where it cannot be read (the process is gone, no ``/proc``). ``pid`` None: this process.

    Recorded at the start and end of each timing window (the timing process's CPU): a time the host paces
    (a host-bound call) can depend on the core it was issued from (H200 session 27: the same host-bound
    calls took one of two levels, up to 2.4x apart, in different processes on a quiet host)."""
    from .execution.quiet import proc_stat

    fields = proc_stat("self" if pid is None else int(pid))  # from the state (field 3) on
    try:
        return int(fields[36]) if fields else None
    except (ValueError, IndexError):
        return None


def cpu_numa_node(cpu: int | None) -> int | None:
    """The NUMA node of a CPU (its ``/sys/devices/system/cpu/cpu<N>/node<M>`` entry), or None where sysfs does
    not say (one node, or no sysfs)."""
    if cpu is None:
        return None
    try:
        for name in os.listdir(f"/sys/devices/system/cpu/cpu{int(cpu)}"):
            if name.startswith("node") and name[4:].isdigit():
                return int(name[4:])
    except OSError:
        pass
    return None


def cpu_mhz(cpu: int | None) -> float | None:
    """A CPU's current frequency in MHz (``cpufreq/scaling_cur_freq``), or None where the kernel does not
    expose it (common in virtual machines)."""
    if cpu is None:
        return None
    try:
        with open(f"/sys/devices/system/cpu/cpu{int(cpu)}/cpufreq/scaling_cur_freq") as f:
            return round(int(f.read().strip()) / 1000.0, 1)
    except (OSError, ValueError):
        return None


def gpu_numa_node(device: Any) -> int | None:
    """The NUMA node of a CUDA device's PCI function (``/sys/bus/pci/devices/<address>/numa_node``; -1 from
    sysfs, meaning none, becomes None), or None off CUDA or where it cannot be read.

    Args:
        device: a ``torch.device`` (or its string) of type ``cuda``.
    """
    try:
        import torch

        dev = torch.device(device)
        if dev.type != "cuda" or not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(dev)
        addr = (f"{int(getattr(props, 'pci_domain_id', 0)):04x}:{int(props.pci_bus_id):02x}:"
                f"{int(props.pci_device_id):02x}.0")
        with open(f"/sys/bus/pci/devices/{addr}/numa_node") as f:
            node = int(f.read().strip())
        return node if node >= 0 else None
    except Exception:  # noqa: BLE001 - evidence only
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_probe_ms(repeats: int = 3) -> float:
    """Milliseconds a fixed piece of single-threaded Python work takes on this host (the fastest of
    ``repeats``; about 20-40 ms on a current server core). Not part of any hash: it tells hosts of one name
    apart by speed. H200 session 20: two machines lent as the same kind, with the same generic
    ``cpu_model``, ran a candidate's host-side steps (its build from the cache, its first call) 1.5 to 2 times
    apart, and with them a whole sweep's wall time."""
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        acc = 0
        for i in range(100_000):
            acc ^= hash(str(i)) & 0xFF
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000.0, 2)


def _hash(d: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def hardware_fingerprint(fp: dict[str, Any]) -> str:
    """Hash of the device-identifying fields of a fingerprint dict."""
    return _hash({k: fp.get(k) for k in ("device_type", "device_name", "device_memory_bytes", "sm_count",
                                          "compute_capability", "cpu_model")})


def software_fingerprint(fp: dict[str, Any]) -> str:
    """Hash of the software stack fields of a fingerprint dict."""
    return _hash({k: fp.get(k) for k in ("driver", "cuda", "torch", "triton", "python")})


def collect_fingerprint(device: str = "cpu") -> dict[str, Any]:
    """Everything known about the device and stack (call in the process that owns ``device``).

    Returns:
        A JSON-ready dict: ``device_type``, ``device_name``, ``device_count``, ``device_memory_bytes``,
        ``sm_count``, ``compute_capability``, ``l2_bytes``, ``driver``, ``cuda``, ``torch``, ``triton``,
        ``python``, ``host``, ``cpu_model``, ``cpu_count``, ``host_probe_ms`` (:func:`host_probe_ms`), ``clocks`` (nvidia-smi), and the two hashes
        ``hardware_fingerprint`` and ``software_fingerprint``.
    """
    import torch

    fp: dict[str, Any] = {
        "device": device,
        "device_type": "cuda" if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "host_probe_ms": host_probe_ms(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    try:
        import triton

        fp["triton"] = triton.__version__
    except Exception:
        fp["triton"] = None
    if fp["device_type"] == "cuda":
        dev = torch.device(device)
        props = torch.cuda.get_device_properties(dev)
        fp.update({
            "device_name": props.name,
            "device_count": torch.cuda.device_count(),
            "device_memory_bytes": int(props.total_memory),
            "sm_count": int(props.multi_processor_count),
            "compute_capability": f"{props.major}.{props.minor}",
            "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
        })
        drv = _smi("driver_version")
        fp["driver"] = drv[0] if drv else None
        fp["clocks"] = read_gpu_clocks()
    else:
        fp.update({"device_name": fp["cpu_model"], "device_count": 1, "device_memory_bytes": None,
                   "sm_count": None, "compute_capability": None, "l2_bytes": None, "driver": None, "clocks": []})
    fp["hardware_fingerprint"] = hardware_fingerprint(fp)
    fp["software_fingerprint"] = software_fingerprint(fp)
    return fp


#: The fields of a run's hardware record (:func:`collect_fingerprint`) that every part of a run must share:
#: the device's kind and model (a MIG slice or another SKU has its own name, SM count or compute capability)
#: and the stack that compiles and runs the candidates and baselines. Not the driver, Python or host: machines
#: lent as one kind differ in them without changing what a candidate's time measures.
RESUME_FIELDS = ("device_type", "device_name", "compute_capability", "sm_count", "torch", "cuda", "triton")


def planned_fingerprint(devices: list[str]) -> dict[str, Any]:
    """What this process can tell, before any device slot starts and without initialising CUDA, of the
    fingerprint that slots on ``devices`` will report (:func:`collect_fingerprint`): ``device_type``,
    ``torch`` and ``cuda`` (the slots run this interpreter), and ``device_name`` where it is known (the CPU's
    model; the first GPU's name from nvidia-smi, absent without it).

    Args:
        devices: the slots' devices, e.g. ``["cuda:0", "cuda:0"]`` or ``["cpu"]`` (the first one is asked).
    """
    import torch

    dev = devices[0] if devices else "cpu"
    fp: dict[str, Any] = {"device_type": "cuda" if dev.startswith("cuda") else "cpu", "torch": torch.__version__,
                          "cuda": torch.version.cuda}
    if fp["device_type"] == "cpu":
        fp["device_name"] = _cpu_model()
        return fp
    try:
        index: str | None = visible_device_id(dev.split(":", 1)[1] if ":" in dev else 0)
    except ValueError:
        index = None
    names = _smi("name", index) if index is not None else []
    if names:
        fp["device_name"] = names[0]
    return fp


def fingerprint_differences(run: dict[str, Any], here: dict[str, Any], *, planned: bool = False) -> list[str]:
    """The :data:`RESUME_FIELDS` in which this machine's fingerprint differs from a run's stored one.

    A field is compared only where both records hold it (an older record may lack one; a planned one lacks
    those only the device slots can read).

    Args:
        run: the run's stored hardware record; here: this machine's (:func:`collect_fingerprint`, or
            :func:`planned_fingerprint` with ``planned=True``: a GPU name from nvidia-smi then matches a stored
            name it begins or that begins with it, as the whole GPU's name does a MIG slice's).

    Returns:
        One ``"device_type: cuda (run) vs cpu (here)"`` per differing field, in :data:`RESUME_FIELDS` order.
    """
    out = []
    for f in RESUME_FIELDS:
        if f not in run or f not in here or run[f] == here[f]:
            continue
        a, b = str(run[f]), str(here[f])
        if planned and f == "device_name" and here.get("device_type") == "cuda" and run[f] and here[f] \
                and (a.startswith(b) or b.startswith(a)):
            continue
        out.append(f"{f}: {run[f]} (run) vs {here[f]} (here)")
    return out
