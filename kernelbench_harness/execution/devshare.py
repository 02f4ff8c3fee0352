"""Device memory shared between the trusted side and one candidate process (CUDA IPC).

On a CUDA device the input sets and the candidate's outputs cross between the two processes as device
memory instead of files: the trusted side allocates one buffer per input set and one for outputs with
the driver's ``cuMemAlloc`` (each its own allocation, so the handle it exports maps that buffer and
nothing else of the trusted process), fills the input buffers and passes their ``cuIpcGetMemHandle``
handles (64 bytes, hex in the job) to the candidate's process, which maps them with
``cuIpcOpenMemHandle``. A candidate copies each output into the output buffer and describes it by
offset, dtype and shape; the trusted side checks the description against the buffer's size and copies
the bytes into memory of its own before judging. The candidate process never sends a handle the
trusted side opens. What the candidate could do to the shared buffers (write into them at any time) it
could do to its own copies of the inputs and to the files of the file exchange: the trusted side never
reads the input buffers back, and each candidate gets buffers of its own, freed when its process ends.

A six-GiB input set crosses in milliseconds this way; through a file on tmpfs it took seconds each way
(KernelBench L1/20-22: about 100 s of a 110 s evaluation went to input and output files). Nothing of
this module runs on a CPU device; where the driver refuses (no IPC on the platform, a sandbox layer),
the exchange falls back to files.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

import torch

__all__ = ["SharedBuffer", "open_shared", "available", "layout", "round_up", "ALIGN", "GRANULE", "DevShareError"]

log = logging.getLogger(__name__)

#: offsets inside a shared buffer are multiples of this (every dtype's alignment, and coalesced copies)
ALIGN = 512
#: allocations are whole multiples of this (the granule CUDA IPC maps)
GRANULE = 2 << 20
_HANDLE_BYTES = 64
_IPC_LAZY_ENABLE_PEER_ACCESS = 1

_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


class _Handle(ctypes.Structure):
    """``CUipcMemHandle``: 64 opaque bytes, passed by value to ``cuIpcOpenMemHandle``."""

    _fields_ = [("reserved", ctypes.c_char * _HANDLE_BYTES)]


class DevShareError(RuntimeError):
    """The driver refused an allocation, an export or a mapping (the caller falls back to files)."""


def _cuda() -> ctypes.CDLL:
    """The driver library (``libcuda.so.1``), loaded once."""
    global _lib
    with _lib_lock:
        if _lib is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise DevShareError(f"no CUDA driver library: {e}") from None
            u64p = ctypes.POINTER(ctypes.c_uint64)
            for name, args in (("cuMemAlloc_v2", [u64p, ctypes.c_size_t]), ("cuMemFree_v2", [ctypes.c_uint64]),
                               ("cuIpcGetMemHandle", [ctypes.POINTER(_Handle), ctypes.c_uint64]),
                               ("cuIpcOpenMemHandle_v2", [u64p, _Handle, ctypes.c_uint]),
                               ("cuIpcCloseMemHandle", [ctypes.c_uint64]),
                               ("cuMemGetAddressRange_v2", [u64p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]),
                               ("cuCtxGetCurrent", [ctypes.POINTER(ctypes.c_void_p)])):
                fn = getattr(lib, name)
                fn.argtypes = args
                fn.restype = ctypes.c_int
            _lib = lib
        return _lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise DevShareError(f"{what} failed (CUresult {rc})")


def _current_context(device: torch.device) -> None:
    """Make torch's context for ``device`` current on this thread (driver calls use the current one)."""
    torch.cuda.set_device(device)
    torch.cuda.init()
    torch.empty(1, device=device)  # the runtime creates and binds the device's primary context
    ctx = ctypes.c_void_p()
    _check(_cuda().cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        raise DevShareError("no current CUDA context on this thread")


class _Iface:
    """A device range as ``__cuda_array_interface__`` (uint8), for a zero-copy torch view."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 2}


def _view(ptr: int, nbytes: int, device: torch.device) -> torch.Tensor:
    t = torch.as_tensor(_Iface(ptr, nbytes), device=device)
    if t.data_ptr() != ptr or t.numel() != nbytes:
        raise DevShareError("torch did not view the shared range in place")
    return t


def round_up(n: int, k: int = ALIGN) -> int:
    """``n`` rounded up to a multiple of ``k``."""
    return (n + k - 1) // k * k


class SharedBuffer:
    """One device allocation of ``nbytes`` (at least 1) bytes of its own, exportable to a child process.

    The whole allocation (``capacity``: ``nbytes`` rounded up to :data:`GRANULE`) starts filled with 0xFF
    bytes (:meth:`poison`).

    Attributes:
        tensor: a uint8 tensor of ``nbytes`` viewing the allocation (zero-copy; valid until :meth:`free`).
        handle: the IPC handle as 128 hex digits, for the importing process's :func:`open_shared`.

    Raises:
        DevShareError: the driver refused the allocation or the export (out of memory, no IPC).
    """

    def __init__(self, nbytes: int, device: torch.device) -> None:
        self.nbytes = max(1, int(nbytes))
        self.device = device
        self._ptr = 0
        _current_context(device)
        lib = _cuda()
        ptr = ctypes.c_uint64()
        # whole 2 MiB granules: the driver may carve smaller allocations out of one block, and a handle
        # maps the whole block (CUDA Programming Guide, interprocess communication)
        self.capacity = round_up(self.nbytes, GRANULE)
        _check(lib.cuMemAlloc_v2(ctypes.byref(ptr), self.capacity), f"cuMemAlloc of {self.capacity} bytes")
        self._ptr = ptr.value
        try:
            h = _Handle()
            _check(lib.cuIpcGetMemHandle(ctypes.byref(h), self._ptr), "cuIpcGetMemHandle")
            self.handle = bytes(h)[:_HANDLE_BYTES].hex()
            self._whole = _view(self._ptr, self.capacity, device)
            self.tensor = self._whole[:self.nbytes]
            self.poison()
        except BaseException:
            lib.cuMemFree_v2(self._ptr)
            self._ptr = 0
            raise

    def poison(self) -> None:
        """Fill the whole allocation with 0xFF bytes (NaN in every floating dtype): what the driver hands
        out again is not cleared, so without this a buffer could show the candidate this process's old
        memory (reference outputs among it), or pass it off as the candidate's output."""
        self._whole.fill_(0xFF)
        torch.cuda.synchronize(self.device)

    def free(self) -> None:
        """Free the allocation (call it once the importing process has ended); the tensor is dropped."""
        if self._ptr:
            self.tensor = None  # type: ignore[assignment]
            self._whole = None  # type: ignore[assignment]
            torch.cuda.synchronize(self.device)
            _cuda().cuMemFree_v2(self._ptr)
            self._ptr = 0

    def __del__(self) -> None:  # a buffer never freed explicitly (an exception path) is not leaked
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def open_shared(handle: str, nbytes: int, device: torch.device) -> torch.Tensor:
    """Map a buffer another process exported (``SharedBuffer.handle``) and view its first ``nbytes``.

    Args:
        handle: 128 hex digits.
        nbytes: bytes to view; the mapped allocation must hold at least as many.
        device: the CUDA device the buffer lives on.

    Returns:
        A uint8 tensor of ``nbytes`` viewing the mapping (writes reach the exporting process's buffer).
        The mapping stays open for the life of this process.

    Raises:
        DevShareError: a malformed handle, a mapping the driver refuses, or an allocation smaller than
            ``nbytes``.
    """
    try:
        raw = bytes.fromhex(handle)
    except (TypeError, ValueError):
        raw = b""
    if len(raw) != _HANDLE_BYTES or not isinstance(nbytes, int) or nbytes < 1:
        raise DevShareError("malformed shared-buffer description")
    _current_context(device)
    lib = _cuda()
    ptr = ctypes.c_uint64()
    _check(lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), _Handle.from_buffer_copy(raw), _IPC_LAZY_ENABLE_PEER_ACCESS),
           "cuIpcOpenMemHandle")
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr.value), "cuMemGetAddressRange")
    if base.value != ptr.value or size.value < nbytes:
        lib.cuIpcCloseMemHandle(ptr.value)
        raise DevShareError(f"the shared allocation holds {size.value} bytes, {nbytes} expected")
    return _view(ptr.value, nbytes, device)



ENV = "KBENCH_DEVSHARE"


def enabled() -> bool:
    """Whether ``KBENCH_DEVSHARE`` lets candidates share device memory (unset, ``1``, ``true``, ``on``,
    ``yes``: yes; ``0``, ``false``, ``off``, ``no``: files).

    Raises:
        ValueError: any other value.
    """
    from ..envflags import env_switch

    return env_switch(ENV)


def available(device: torch.device) -> bool:
    """Whether this process can allocate and export a shared buffer on ``device`` (CUDA only)."""
    if device.type != "cuda":
        return False
    try:
        SharedBuffer(ALIGN, device).free()
        return True
    except Exception as e:  # noqa: BLE001 - any refusal means files
        log.info("device memory sharing unavailable on %s: %s", device, e)
        return False


def layout(values: list[Any]) -> tuple[list[dict[str, Any] | None], int]:
    """Where each top-level tensor of ``values`` goes in one shared buffer.

    Returns:
        ``(places, nbytes)``: for each value a ``{"offset", "nbytes"}`` (tensors) or None (anything
        else, which travels in the job as before), and the buffer's size in bytes (offsets aligned to
        :data:`ALIGN`).
    """
    places: list[dict[str, Any] | None] = []
    off = 0
    for v in values:
        if isinstance(v, torch.Tensor):
            n = v.numel() * v.element_size()
            places.append({"offset": off, "nbytes": n})
            off = round_up(off + n)
        else:
            places.append(None)
    return places, max(off, ALIGN)
