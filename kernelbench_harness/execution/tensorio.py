"""Tensor exchange between the trusted side and a candidate worker without pickle.

A tensor travels as a raw little-endian file plus a JSON description (dtype, shape). Nothing the
candidate process writes is ever unpickled or imported by the trusted side: a description is
validated against an allow-list of dtypes and against the file's size before any byte is read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["DTYPES", "write_tensor", "read_tensor", "encode_value", "decode_value", "TensorFormatError"]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "complex64": torch.complex64,
}
_NAMES = {v: k for k, v in DTYPES.items()}


class TensorFormatError(ValueError):
    """A tensor description or file that does not check out (wrong dtype name, size mismatch...)."""


def write_tensor(t: torch.Tensor, path: Path) -> dict[str, Any]:
    """Write ``t`` (any device; copied to CPU, made contiguous) to ``path``; return its description.

    Raises:
        TensorFormatError: for a dtype outside :data:`DTYPES`.
    """
    if t.dtype not in _NAMES:
        raise TensorFormatError(f"unsupported dtype {t.dtype}")
    c = t.detach().to("cpu").contiguous()
    if c.dtype == torch.bfloat16:
        arr = c.view(torch.int16).numpy()
    else:
        arr = c.numpy()
    with open(path, "wb") as f:
        f.write(memoryview(np.ascontiguousarray(arr)).cast("B"))
    return {"file": path.name, "dtype": _NAMES[c.dtype], "shape": list(c.shape)}


def read_tensor(desc: dict[str, Any], folder: Path, *, max_bytes: int = 1 << 40) -> torch.Tensor:
    """Read a tensor written by :func:`write_tensor` from ``folder`` (CPU tensor, owned memory).

    Raises:
        TensorFormatError: unknown dtype, bad shape, a file outside ``folder``, or a size mismatch.
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
    numel = 1
    for s in shape:
        numel *= s
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = numel * itemsize
    if nbytes > max_bytes:
        raise TensorFormatError(f"tensor of {nbytes} bytes exceeds the limit {max_bytes}")
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise TensorFormatError(f"missing tensor file {name}: {e}") from None
    if size != nbytes:
        raise TensorFormatError(f"{name}: {size} bytes on disk, {nbytes} expected for {dtype} {shape}")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    np_dtype = np.int16 if dtype == torch.bfloat16 else torch.empty((), dtype=dtype).numpy().dtype
    arr = np.fromfile(path, dtype=np_dtype, count=numel)
    t = torch.from_numpy(arr).reshape(shape)
    return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t


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
