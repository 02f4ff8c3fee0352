"""Tensor exchange between the trusted side and a candidate worker without pickle.

A tensor travels as a raw little-endian file plus a JSON description (dtype, shape). Nothing the
candidate process writes is ever unpickled or imported by the trusted side: a description is
validated against an allow-list of dtypes and against the file's size before any byte is read.

A tensor on a GPU of at least :data:`STAGE_MIN_BYTES` crosses the host through one page-locked
buffer of :data:`STAGE_BYTES` per process, a chunk at a time (:func:`write_tensor`, and
:func:`read_tensor` given a CUDA ``device``), instead of through a host copy of the whole tensor: a
multi-GB output (4.3 GB in KernelBench L1/7 and L1/9) no longer takes a fresh pageable host
allocation of its size on each side, page faults and all, and the transfers run at pinned speed.
The files' bytes are the same either way.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["DTYPES", "LARGE_SET_BYTES", "nbytes_of", "tensor_name", "write_tensor", "read_tensor", "encode_value", "decode_value", "TensorFormatError"]

#: a job whose input set and outputs take at least this many bytes is "large" for device memory: the
#: candidate's process keeps one set of its own and hands its call's copies back before the trusted side
#: judges (worker.py), and the trusted side hands its judging's temporaries back before the next call
#: (device.py); the memory ledger's claims count the two apart (DeviceEvaluator.work_nbytes)
LARGE_SET_BYTES = 256 << 20

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "complex64": torch.complex64,
}
_NAMES = {v: k for k, v in DTYPES.items()}


def nbytes_of(dtype: torch.dtype, shape: list[int]) -> int:
    """Bytes of a contiguous tensor of ``dtype`` and ``shape`` (Python integers: no overflow)."""
    n = torch.empty((), dtype=dtype).element_size()
    for s in shape:
        n *= s
    return n


def tensor_name(dtype: torch.dtype) -> str:
    """The exchange name of ``dtype`` (a key of :data:`DTYPES`).

    Raises:
        TensorFormatError: for a dtype outside :data:`DTYPES`.
    """
    try:
        return _NAMES[dtype]
    except KeyError:
        raise TensorFormatError(f"unsupported dtype {dtype}") from None


class TensorFormatError(ValueError):
    """A tensor description or file that does not check out (wrong dtype name, size mismatch...)."""


def write_tensor(t: torch.Tensor, path: Path) -> dict[str, Any]:
    """Write ``t`` (any device; copied to CPU, made contiguous) to ``path``; return its description.

    Raises:
        TensorFormatError: for a dtype outside :data:`DTYPES`.
    """
    name = tensor_name(t.dtype)
    t = t.detach()
    if t.device.type == "cuda" and t.is_contiguous() and t.numel() * t.element_size() >= STAGE_MIN_BYTES:
        with _STAGE_LOCK:
            _write_staged(t, path, _staging())
        return {"file": path.name, "dtype": name, "shape": list(t.shape)}
    c = t.to("cpu").contiguous()
    if c.dtype == torch.bfloat16:
        arr = c.view(torch.int16).numpy()
    else:
        arr = c.numpy()
    with open(path, "wb") as f:
        f.write(memoryview(np.ascontiguousarray(arr)).cast("B"))
    return {"file": path.name, "dtype": name, "shape": list(c.shape)}


def read_tensor(desc: dict[str, Any], folder: Path, *, max_bytes: int = 1 << 40,
                device: torch.device | str | None = None) -> torch.Tensor:
    """Read a tensor written by :func:`write_tensor` from ``folder`` (owned memory).

    Args:
        max_bytes: the largest tensor accepted, in bytes.
        device: where the tensor is returned (None: the CPU). A CUDA device receives a tensor of at
            least :data:`STAGE_MIN_BYTES` through the pinned staging buffer, chunk by chunk; the values
            are those of ``read_tensor(desc, folder).to(device)``.

    Raises:
        TensorFormatError: unknown dtype, bad shape, a file outside ``folder``, or a size mismatch
            (also a file that shrinks while it is read).
    """
    try:
        dtype = DTYPES[str(desc["dtype"])]
        shape = [int(s) for s in desc["shape"]]
        name = str(desc["file"])
    except (KeyError, TypeError, ValueError) as e:
        raise TensorFormatError(f"bad tensor description {desc!r}: {e}") from None
    if any(s < 0 for s in shape) or "/" in name or name.startswith("."):
        raise TensorFormatError(f"bad tensor description {desc!r}")
    path = folder / name
    nbytes = nbytes_of(dtype, shape)
    numel = nbytes // torch.empty((), dtype=dtype).element_size()
    if nbytes > max_bytes:
        raise TensorFormatError(f"tensor of {nbytes} bytes exceeds the limit {max_bytes}")
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise TensorFormatError(f"missing tensor file {name}: {e}") from None
    if size != nbytes:
        raise TensorFormatError(f"{name}: {size} bytes on disk, {nbytes} expected for {dtype} {shape}")
    if device is not None and torch.device(device).type == "cuda" and nbytes >= STAGE_MIN_BYTES:
        out = torch.empty(shape, dtype=dtype, device=device)
        with _STAGE_LOCK:
            _read_staged(path, out, _staging())
        return out
    if nbytes == 0:
        t = torch.empty(shape, dtype=dtype)
        return t if device is None else t.to(device)
    np_dtype = np.int16 if dtype == torch.bfloat16 else torch.empty((), dtype=dtype).numpy().dtype
    arr = np.fromfile(path, dtype=np_dtype, count=numel)
    if arr.size != numel:
        raise TensorFormatError(f"{name}: shorter than {nbytes} bytes when read")
    t = torch.from_numpy(arr).reshape(shape)
    t = t.view(torch.bfloat16) if dtype == torch.bfloat16 else t
    return t if device is None else t.to(device)


# GPU tensors of at least STAGE_MIN_BYTES cross the host in chunks of STAGE_BYTES through one buffer
STAGE_BYTES = 64 << 20
STAGE_MIN_BYTES = 16 << 20
_STAGE: dict[int, torch.Tensor] = {}  # process id -> its staging buffer (a forked child makes its own)
_STAGE_LOCK = threading.Lock()


def _staging() -> torch.Tensor:
    """This process's staging buffer: ``STAGE_BYTES`` bytes (uint8) of page-locked host memory, or of
    ordinary memory where pinning fails; made at first use and kept."""
    pid = os.getpid()
    buf = _STAGE.get(pid)
    if buf is None:
        try:
            buf = torch.empty(STAGE_BYTES, dtype=torch.uint8, pin_memory=True)
        except RuntimeError:  # no pinned memory to be had: staged all the same, at pageable speed
            buf = torch.empty(STAGE_BYTES, dtype=torch.uint8)
        _STAGE.clear()  # a buffer inherited through fork belongs to the parent
        _STAGE[pid] = buf
    return buf


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """The bytes of contiguous ``t`` in row-major order, as a flat uint8 view (no copy)."""
    return t.reshape(-1).view(torch.uint8)


def _write_staged(t: torch.Tensor, path: Path, stage: torch.Tensor) -> None:
    """Write contiguous ``t`` (any device) to ``path`` in chunks of ``len(stage)`` bytes, each copied into
    ``stage`` (a host uint8 buffer) and written from there: the file :func:`write_tensor` writes."""
    src = _bytes_of(t)
    view = memoryview(stage.numpy())
    n, step = src.numel(), stage.numel()
    with open(path, "wb") as f:
        for start in range(0, n, step):
            m = min(step, n - start)
            stage[:m].copy_(src[start:start + m])  # waits for a device-to-host copy to finish
            f.write(view[:m])


def _read_staged(path: Path, out: torch.Tensor, stage: torch.Tensor) -> None:
    """Fill contiguous ``out`` (any device) with the first ``out``'s size bytes of ``path``, in chunks of
    ``len(stage)`` bytes read into ``stage`` (a host uint8 buffer) and copied from there.

    Raises:
        TensorFormatError: the file ends before ``out`` is full.
    """
    dst = _bytes_of(out)
    view = memoryview(stage.numpy())
    n, step = dst.numel(), stage.numel()
    with open(path, "rb", buffering=0) as f:
        for start in range(0, n, step):
            m = min(step, n - start)
            got = 0
            while got < m:  # a raw read may return less than asked
                k = f.readinto(view[got:m])
                if not k:
                    raise TensorFormatError(f"{path.name}: shorter than {n} bytes when read")
                got += k
            dst[start:start + m].copy_(stage[:m])  # host-to-device from the buffer, before it is reused


def encode_value(v: Any, folder: Path, prefix: str, counter: list[int]) -> Any:
    """JSON-encode a value made of tensors, numbers, strings, None, lists/tuples and dicts.

    Tensors are written to ``folder`` as ``{prefix}{n}.bin``; others are tagged JSON.

    Raises:
        TypeError: for anything else (the problem's inputs must be plain data).
    """
    if isinstance(v, torch.Tensor):
        counter[0] += 1
        return {"__tensor__": write_tensor(v, folder / f"{prefix}{counter[0]}.bin")}
    if isinstance(v, bool) or v is None or isinstance(v, (int, float, str)):
        if isinstance(v, float) and not np.isfinite(v):
            return {"__float__": repr(v)}
        return v
    if isinstance(v, (list, tuple)):
        return {"__seq__": "tuple" if isinstance(v, tuple) else "list",
                "items": [encode_value(x, folder, prefix, counter) for x in v]}
    if isinstance(v, dict):
        return {"__dict__": [[encode_value(k, folder, prefix, counter), encode_value(x, folder, prefix, counter)]
                             for k, x in v.items()]}
    if isinstance(v, torch.dtype):
        return {"__dtype__": _NAMES.get(v, str(v))}
    raise TypeError(f"cannot pass a {type(v).__name__} between processes")


def decode_value(v: Any, folder: Path) -> Any:
    """Inverse of :func:`encode_value`."""
    if isinstance(v, dict):
        if "__tensor__" in v:
            return read_tensor(v["__tensor__"], folder)
        if "__float__" in v:
            return float(v["__float__"])
        if "__seq__" in v:
            items = [decode_value(x, folder) for x in v["items"]]
            return tuple(items) if v["__seq__"] == "tuple" else items
        if "__dict__" in v:
            return {decode_value(k, folder): decode_value(x, folder) for k, x in v["__dict__"]}
        if "__dtype__" in v:
            return DTYPES[v["__dtype__"]]
        raise TensorFormatError(f"unknown tagged value {sorted(v)}")
    return v
