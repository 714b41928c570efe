"""`compile_cuda_extension`, as PKB candidates call it: load_inline of one CUDA source (no C++
source: the CUDA source carries its own PYBIND11_MODULE), -O3 plus the caller's flags."""
from __future__ import annotations

import os


def compile_cuda_extension(name: str, cuda_src: str, extra_cuda_cflags: list[str] | None = None,
                           extra_include_paths: list[str] | None = None, extra_ldflags: list[str] | None = None):
    """Build (or load from TORCH_EXTENSIONS_DIR) and return the extension module."""
    import torch
    from torch.utils.cpp_extension import load_inline
    if "TORCH_CUDA_ARCH_LIST" not in os.environ and torch.cuda.is_available():
        # PKB pins Hopper (9.0); building for the GPU at hand is the same there and right elsewhere
        major, minor = torch.cuda.get_device_capability()
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    return load_inline(name=name, cpp_sources="", cuda_sources=cuda_src,
                       extra_cuda_cflags=["-O3", *(extra_cuda_cflags or [])],
                       extra_include_paths=list(extra_include_paths or []),
                       extra_ldflags=list(extra_ldflags or []), with_cuda=True, verbose=False)
