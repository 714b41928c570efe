"""Helpers for the hidden glue of native problems (harness.py's native_setup / native_call), run
inside the ranks. The conventions they rely on are the templates' fixed parts (problems/NATIVE.md):
entry points return 0 or an error code, `const char* kb_last_error()` says why, and IPC templates
export `kb_ipc_alloc(size_t, void**, void* handle64)` and `kb_ipc_open(const void* handle64, void**)`.
"""
from __future__ import annotations

import ctypes
import os
import secrets
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from .native import NativeContext

IPC_HANDLE_BYTES = 64


def declare(lib: ctypes.CDLL, name: str, restype: Any, *argtypes: Any) -> Any:
    """lib.name with its C signature set (ctypes otherwise guesses int for everything)."""
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


def ptr(t: torch.Tensor) -> ctypes.c_void_p:
    """A tensor's data pointer for a `void*` / `T*` parameter."""
    return ctypes.c_void_p(t.data_ptr())


def check(lib: ctypes.CDLL, rc: int, what: str) -> None:
    """Raise RuntimeError naming the call and the library's own message when rc != 0."""
    if rc != 0:
        why = ""
        if hasattr(lib, "kb_last_error"):
            fn = declare(lib, "kb_last_error", ctypes.c_char_p)
            why = (fn() or b"").decode(errors="replace")
        raise RuntimeError(f"{what} returned {rc}" + (f": {why}" if why else ""))


def exchange(obj: object) -> list:
    """Every rank's `obj`, in rank order (the default process group's store; setup only)."""
    from .exchange import all_gather
    return all_gather(obj, "glue", codec="pickle")


def shared_segment(ctx: NativeContext, nbytes: int) -> int:
    """Address of `nbytes` of zeroed memory shared by every rank of the job (a file in /dev/shm,
    else the temporary folder, mapped by each rank and unlinked once all have it, so nothing is left
    behind even if the job is killed)."""
    import mmap

    import torch.distributed as dist
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    mine = os.path.join(base, f"kb-native-{secrets.token_hex(8)}") if ctx.rank == 0 else None
    if mine is not None:
        fd = os.open(mine, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(fd, nbytes)
        os.close(fd)
    path: str = exchange(mine)[0]
    fd = os.open(path, os.O_RDWR)
    mm = mmap.mmap(fd, nbytes)
    os.close(fd)
    dist.barrier()
    if ctx.rank == 0:
        os.unlink(path)
    ctx.state.setdefault("_segments", []).append(mm)      # alive as long as the library uses it
    return ctypes.addressof(ctypes.c_char.from_buffer(mm))


def ipc_buffers(lib: ctypes.CDLL, ctx: NativeContext, nbytes: int) -> ctypes.Array[ctypes.c_void_p]:
    """Every rank's `nbytes` device buffer (zeroed), mapped into this rank through CUDA IPC: a
    ctypes array of W pointers, this rank's own at index ctx.rank."""
    alloc = declare(lib, "kb_ipc_alloc", ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p)
    open_ = declare(lib, "kb_ipc_open", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p))
    own, handle = ctypes.c_void_p(), ctypes.create_string_buffer(IPC_HANDLE_BYTES)
    check(lib, alloc(nbytes, ctypes.byref(own), handle), "kb_ipc_alloc")
    handles = exchange(handle.raw)
    ptrs = (ctypes.c_void_p * ctx.world)()
    for q, h in enumerate(handles):
        if q == ctx.rank:
            ptrs[q] = own.value
        else:
            p = ctypes.c_void_p()
            check(lib, open_(h, ctypes.byref(p)), f"kb_ipc_open(rank {q})")
            ptrs[q] = p.value
    ctx.state.setdefault("_ipc", []).append(ptrs)
    return ptrs


def max_size(ctx: NativeContext, key: str) -> int:
    """The largest value of size field `key` over the job's sizes (buffers are allocated once)."""
    return max(int(cfg[key]) for cfg in ctx.sizes.values())
