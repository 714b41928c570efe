"""The few CUDA driver calls the split needs, through ctypes on libcuda (no extension to build):
memory the checker owns and shares (cuMemAlloc + IPC handle), the candidate's allocations opened
by the checker (cuMemGetAddressRange finds an output's allocation, cuIpcGetMemHandle exports it),
and tensors over raw device pointers (__cuda_array_interface__). Every function pointer is looked
up when Driver() is built, before any candidate code runs in the process."""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

IPC_HANDLE_BYTES = 64
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1


class CUipcMemHandle(ctypes.Structure):
    # bytes, not c_char: a c_char array field reads back cut at its first NUL
    _fields_ = [("reserved", ctypes.c_ubyte * IPC_HANDLE_BYTES)]


class CudaError(RuntimeError):
    pass


class Driver:
    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        ptr, size = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t)
        self._alloc = self._fn(lib, "cuMemAlloc_v2", ptr, ctypes.c_size_t)
        self._free = self._fn(lib, "cuMemFree_v2", ctypes.c_uint64)
        self._memset = self._fn(lib, "cuMemsetD8_v2", ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t)
        self._get = self._fn(lib, "cuIpcGetMemHandle", ctypes.POINTER(CUipcMemHandle), ctypes.c_uint64)
        self._open = self._fn(lib, "cuIpcOpenMemHandle_v2", ptr, CUipcMemHandle, ctypes.c_uint)
        self._close = self._fn(lib, "cuIpcCloseMemHandle", ctypes.c_uint64)
        self._range = self._fn(lib, "cuMemGetAddressRange_v2", ptr, size, ctypes.c_uint64)
        self._err = self._fn(lib, "cuGetErrorString", ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))

    @staticmethod
    def _fn(lib: ctypes.CDLL, name: str, *argtypes: Any) -> Any:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_int, list(argtypes)
        return fn

    def check(self, rc: int, what: str) -> None:
        if rc:
            msg = ctypes.c_char_p()
            self._err(rc, ctypes.byref(msg))
            raise CudaError(f"{what}: CUDA error {rc} ({(msg.value or b'?').decode()})")

    def alloc(self, nbytes: int) -> int:
        p = ctypes.c_uint64()
        self.check(self._alloc(ctypes.byref(p), max(1, nbytes)), "cuMemAlloc")
        self.check(self._memset(p.value, 0, max(1, nbytes)), "cuMemsetD8")
        return p.value

    def free(self, p: int) -> None:
        self._free(p)

    def ipc_handle(self, p: int) -> bytes:
        h = CUipcMemHandle()
        self.check(self._get(ctypes.byref(h), p), "cuIpcGetMemHandle")
        return ctypes.string_at(ctypes.addressof(h), IPC_HANDLE_BYTES)

    def ipc_open(self, handle: bytes) -> int:
        if len(handle) != IPC_HANDLE_BYTES:
            raise CudaError(f"cuIpcOpenMemHandle: a handle of {len(handle)} bytes")
        h = CUipcMemHandle.from_buffer_copy(handle)
        p = ctypes.c_uint64()
        self.check(self._open(ctypes.byref(p), h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
        return p.value

    def ipc_close(self, p: int) -> None:
        self._close(p)

    def allocation(self, p: int) -> tuple[int, int]:
        """(base, size) of the allocation holding device address p."""
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        self.check(self._range(ctypes.byref(base), ctypes.byref(size), p), "cuMemGetAddressRange")
        return base.value, size.value


class _Cai:
    """Bytes of device memory as an object torch.as_tensor takes without copying."""

    def __init__(self, p: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (p, False), "version": 3,
                                         "strides": None}


def bytes_tensor(p: int, nbytes: int, device: Any) -> Any:
    """A uint8 tensor over `nbytes` of device memory at `p` (not owned: the memory outlives it)."""
    import torch
    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8, device=device)
    return torch.as_tensor(_Cai(p, nbytes), device=device)


def context_on_thread(torch: Any, device: int) -> Callable[[], None]:
    """The process's CUDA context for `device`, made on a thread (about 0.3 s: a checker makes its
    own while its solver processes, forked before, make theirs; it forks nothing after). Returns
    the join, which raises what the thread raised; the caller sets its own current device after."""
    failed: list[BaseException] = []

    def make() -> None:
        try:
            torch.cuda.set_device(device)      # the primary context (the current device is per thread)
            torch.cuda.init()
        except BaseException as e:  # noqa: BLE001 - raised again where the caller waits for it
            failed.append(e)
    thread = threading.Thread(target=make, name="kb-context", daemon=True)
    thread.start()

    def join() -> None:
        thread.join()
        if failed:
            raise failed[0]
    return join


def pci_address(torch: Any, device: int) -> str | None:
    """The GPU's PCI address as sysfs names it ("0000:1b:00.0"), or None where torch does not say."""
    try:
        p = torch.cuda.get_device_properties(device)
        dom, bus, dev = (getattr(p, k) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
        return f"{int(dom):04x}:{int(bus):02x}:{int(dev):02x}.0"
    except (AttributeError, RuntimeError, TypeError, ValueError, AssertionError):
        return None
