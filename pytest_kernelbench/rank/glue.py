"""Helpers for the hidden glue of native problems (glue.py's native_setup / native_call), run inside
the ranks. The conventions they rely on are the templates' fixed parts (problems/NATIVE.md): entry
points return 0 or an error code, `const char* kb_last_error()` says why, CUDA templates start with
`int kb_init(int device)`, and IPC templates export `kb_ipc_alloc(size_t, void**, void* handle64)`,
`kb_ipc_open(const void* handle64, void**)`, `size_t kb_buffer_bytes(...)` and `int kb_setup(...)`.

Like nccl-tests' per-collective table, a glue file states only what differs: `ipc_setup` is the
one standard IPC setup (its argument lists in C order), `call_xy` the standard entry point
`fn(x, y, n, stream)`, `call` any other entry point's checked call.
"""
from __future__ import annotations

import ctypes
import os
import secrets
import tempfile
from typing import TYPE_CHECKING, Any, Sequence

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


def max_size(ctx: NativeContext, *keys: str) -> int:
    """The largest value over the job's sizes of size field `keys[0]` times the other `keys`, e.g.
    max_size(ctx, "tokens", "hidden") (buffers are allocated once, for the largest size)."""
    def product(cfg: dict) -> int:
        n = 1
        for key in keys:
            n *= int(cfg[key])
        return n
    return max(product(cfg) for cfg in ctx.sizes.values())


# ---- the standard setup and calls -----------------------------------------------------------------
class _Slot:
    """An argument of kb_buffer_bytes / kb_setup that ipc_setup fills in (RANK, WORLD, BUFS)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"glue.{self.name}"


RANK, WORLD, BUFS = _Slot("RANK"), _Slot("WORLD"), _Slot("BUFS")      # int rank, int world, void** bufs
X_Y_N_STREAM = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p)
"""argtypes of the standard entry point `int fn(const void* x, void* y, long long n, cudaStream_t)`."""


def _c_args(ctx: NativeContext, args: Sequence[Any], bufs: Any) -> tuple[list[Any], list[Any]]:
    """argtypes and values of a C call written as ctypes values (ctypes.c_longlong(n)) and slots."""
    types: list[Any] = []
    values: list[Any] = []
    for a in args:
        if a is RANK or a is WORLD:
            types.append(ctypes.c_int)
            values.append(ctx.rank if a is RANK else ctx.world)
        elif a is BUFS:
            if bufs is None:
                raise TypeError("BUFS is an argument of kb_setup, not of kb_buffer_bytes")
            types.append(ctypes.c_void_p)
            values.append(bufs)
        elif isinstance(a, ctypes._SimpleCData):
            types.append(type(a))
            values.append(a.value)
        else:
            raise TypeError(f"a glue argument is a ctypes value (ctypes.c_longlong(n)) or RANK/WORLD/BUFS, not {a!r}")
    return types, values


def init(lib: ctypes.CDLL, ctx: NativeContext) -> None:
    """`kb_init(device)`, checked: a CUDA template's first call (it sets the device)."""
    check(lib, declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")


def entry_point(lib: ctypes.CDLL, ctx: NativeContext, name: str, *argtypes: Any) -> Any:
    """Declare `int name(argtypes...)` and keep it as ctx.state["fn"], the function `call` calls."""
    fn = ctx.state["fn"] = declare(lib, name, ctypes.c_int, *argtypes)
    return fn


def ipc_setup(lib: ctypes.CDLL, ctx: NativeContext, *, buffer_bytes: Sequence[Any], setup: Sequence[Any],
              entry: Sequence[Any]) -> None:
    """The standard IPC setup, in this order: kb_init(device); nbytes = kb_buffer_bytes(*buffer_bytes);
    every rank's nbytes buffer mapped everywhere (ipc_buffers); kb_setup(*setup); synchronize the
    device and wait for every rank (all buffers mapped and zeroed before anyone's first call); then
    entry = (name, *argtypes) becomes ctx.state["fn"].

    buffer_bytes and setup are the C arguments in order, each a ctypes value whose type is the C
    parameter's (ctypes.c_longlong(data_bytes)) or RANK / WORLD (int) / BUFS (void**: every rank's
    buffer, this rank's at index rank; setup only), e.g.
        ipc_setup(lib, ctx, buffer_bytes=[n], setup=[RANK, WORLD, BUFS, n], entry=("kb_all_reduce", *X_Y_N_STREAM))
    """
    import torch
    init(lib, ctx)
    types, values = _c_args(ctx, buffer_bytes, None)
    nbytes = declare(lib, "kb_buffer_bytes", ctypes.c_size_t, *types)(*values)
    bufs = ipc_buffers(lib, ctx, nbytes)
    types, values = _c_args(ctx, setup, bufs)
    check(lib, declare(lib, "kb_setup", ctypes.c_int, *types)(*values), "kb_setup")
    torch.cuda.synchronize(ctx.device)
    exchange(None)              # every rank mapped every buffer before anyone's first call
    entry_point(lib, ctx, entry[0], *entry[1:])


def nccl_unique_id(lib: ctypes.CDLL, ctx: NativeContext) -> bytes:
    """Rank 0's NCCL unique id on every rank (the template's `int kb_unique_id_bytes()` and
    `int kb_unique_id(char* out)`), for its kb_setup to build the communicator."""
    nbytes = declare(lib, "kb_unique_id_bytes", ctypes.c_int)()
    uid = None
    if ctx.rank == 0:
        buf = ctypes.create_string_buffer(nbytes)
        check(lib, declare(lib, "kb_unique_id", ctypes.c_int, ctypes.c_char_p)(buf), "kb_unique_id")
        uid = buf.raw
    return exchange(uid)[0]


def call(lib: ctypes.CDLL, ctx: NativeContext, *args: Any) -> None:
    """ctx.state["fn"](*args); raises naming the entry point and kb_last_error() unless it returns 0."""
    fn = ctx.state["fn"]
    check(lib, fn(*args), fn.__name__)


def call_xy(lib: ctypes.CDLL, ctx: NativeContext, x: torch.Tensor, y: torch.Tensor, n: int) -> torch.Tensor:
    """The standard entry point fn(x, y, n, stream) on ctx.stream(), checked; returns y."""
    call(lib, ctx, ptr(x), ptr(y), n, ctx.stream())
    return y
