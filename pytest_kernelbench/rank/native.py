"""Native problems in the candidate process (problems/NATIVE.md): load the library the pytest
process built and make the problem's glue.py the candidate's solution(). Its setup (native_setup:
exchanging IPC handles or a shared segment's name over the candidate group) runs once at import;
native_call(lib, inputs, ctx) then runs inside every candidate call."""
from __future__ import annotations

import ctypes
import os
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    import torch


class NativeLoadError(ImportError):
    """The built library does not load (an unresolved symbol, a missing dependency)."""


class NativeContext:
    """What the glue gets: this rank, the job's sizes and dtype, and `state` for its own objects
    (buffers, mappings) that must live as long as the library."""

    def __init__(self, rank: int, world: int, device: torch.device, dtype: torch.dtype, sizes: dict) -> None:
        self.rank, self.world, self.device, self.dtype, self.sizes = rank, world, device, dtype, sizes
        self.state: dict = {}

    def stream(self) -> int:
        """The current CUDA stream as a cudaStream_t value (0 on CPU); kernels go on it."""
        if self.device.type != "cuda":
            return 0
        import torch
        return int(torch.cuda.current_stream(self.device).cuda_stream)


def load(lib_path: str, glue: ModuleType, ctx: NativeContext) -> SimpleNamespace:
    """A module-like object whose solution(*inputs) calls glue.native_call(lib, inputs, ctx)."""
    try:
        lib = ctypes.CDLL(lib_path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as e:
        raise NativeLoadError(f"the built library does not load: {e}") from None
    setup = getattr(glue, "native_setup", None)
    if setup is not None:
        setup(lib, ctx)
    call = glue.native_call

    def solution(*inputs: Any) -> Any:
        return call(lib, inputs, ctx)
    return SimpleNamespace(solution=solution, lib=lib)
