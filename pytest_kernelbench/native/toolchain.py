"""What a native problem's build recipe says and what this machine offers for it: the recipe
(problem.yaml `build`), the compilers and libraries a recipe may name, their versions and paths here.
Read by the spec (checking problem.yaml), the prompt (what the model is told) and the build.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

COMPILERS = {"nvcc": "nvcc", "g++": "g++"}
SUFFIX = {"nvcc": ".cu", "g++": ".cpp"}
# what a recipe may name in build.libraries (programmer-facing names; the prompt lists them)
LINKABLE = ("cudart", "cuda", "nccl", "nccl_device", "nvshmem", "pthread", "rt")


class Unavailable(Exception):
    """A library the recipe needs is not on this machine; str() says what to install."""


@dataclass(frozen=True)
class Recipe:
    compiler: str
    flags: tuple = ()
    libraries: tuple = ()
    headers: tuple = ()          # headers a region may #include
    asm: bool = False            # inline assembly allowed in regions

    @classmethod
    def from_yaml(cls, data: dict) -> "Recipe":
        return cls(compiler=data["compiler"], flags=tuple(data.get("flags") or ()),
                   libraries=tuple(data.get("libraries") or ()), headers=tuple(data.get("headers") or ()),
                   asm=bool(data.get("asm", False)))

    @classmethod
    def of(cls, build: dict | None, problem_id: str) -> "Recipe":
        """A native problem's recipe (problem.yaml `build`, checked when the problem loaded)."""
        if build is None:
            raise ValueError(f"{problem_id} has no build recipe: not a native problem")
        return cls.from_yaml(build)


@dataclass
class Lib:
    name: str
    version: str | None = None
    include: list = field(default_factory=list)
    libdirs: list = field(default_factory=list)
    link: list = field(default_factory=list)      # linker arguments (-lfoo, -l:libfoo.so.2)
    flags: list = field(default_factory=list)     # compiler flags the library needs (-rdc=true)


# ---- the machine -----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def compiler_version(compiler: str) -> str | None:
    exe = shutil.which(COMPILERS[compiler])
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    if compiler == "nvcc":
        m = re.search(r"release (\d+\.\d+)", out)
        return f"CUDA {m.group(1)}" if m else (lines[-1] if lines else None)
    return lines[0] if lines else None


def _wheel_dir(package: str) -> Path | None:
    """nvidia.<x> from a pip wheel (the one torch's CUDA build brings), without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    locs = list(spec.submodule_search_locations or []) if spec else []
    return Path(locs[0]) if locs else None


def _cuda_roots() -> list:
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    roots = [Path(env)] if env else []
    return roots + [Path("/usr/local/cuda"), *sorted(Path("/usr/local").glob("cuda-*"), reverse=True)]


def _find(header: str, env: str, wheel: str) -> Path | None:
    roots = [Path(os.environ[env])] if os.environ.get(env) else []
    w = _wheel_dir(wheel)
    if w:
        roots.append(w)
    roots += [*_cuda_roots(), Path("/usr"), Path("/usr/local")]
    for root in roots:
        if (root / "include" / header).is_file():
            return root
    return None


def _libfile(root: Path, stem: str) -> tuple[str, str] | None:
    for d in ("lib", "lib64", "lib/x86_64-linux-gnu"):
        for f in sorted((root / d).glob(f"lib{stem}.so*")) if (root / d).is_dir() else []:
            return str(root / d), ("-l" + stem if f.name == f"lib{stem}.so" else f"-l:{f.name}")
    return None


def _nccl_version(header: Path) -> str | None:
    text = header.read_text(errors="replace")
    found = [re.search(rf"#define NCCL_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    parts = [m.group(1) for m in found if m is not None]
    return "NCCL " + ".".join(parts) if len(parts) == len(found) else None


def resolve(name: str) -> Lib:
    """Where `name`'s headers and library are on this machine. Raises Unavailable."""
    if name in ("pthread", "rt"):
        return Lib(name, link=[f"-l{name}"])
    if name == "cudart":
        return Lib(name, version=compiler_version("nvcc"))      # nvcc links it (static) itself
    if name == "cuda":
        # the driver library; where only its stub exists (a build machine without a GPU) link
        # against the stub: the real libcuda.so.1 is found when the library is loaded
        stubs = [str(d / "lib64" / "stubs") for d in _cuda_roots() if (d / "lib64" / "stubs").is_dir()]
        return Lib(name, version=compiler_version("nvcc"), libdirs=[], link=[*(f"-L{d}" for d in stubs[:1]), "-lcuda"])
    if name in ("nccl", "nccl_device"):
        root = _find("nccl.h", "NCCL_HOME", "nvidia.nccl")
        if root is None:
            raise Unavailable("nccl.h not found (pip install nvidia-nccl-cu12, or set NCCL_HOME)")
        found = _libfile(root, "nccl")
        if found is None:
            raise Unavailable(f"nccl.h is in {root}/include but libnccl.so* is not beside it")
        return Lib(name, _nccl_version(root / "include" / "nccl.h"), [str(root / "include")], [found[0]], [found[1]])
    if name == "nvshmem":
        root = _find("nvshmem.h", "NVSHMEM_HOME", "nvidia.nvshmem")
        if root is None:
            raise Unavailable("nvshmem.h not found (pip install nvidia-nvshmem-cu12, or set NVSHMEM_HOME)")
        host = _libfile(root, "nvshmem_host")
        if host is None:
            raise Unavailable(f"nvshmem.h is in {root}/include but libnvshmem_host.so* is not beside it")
        return Lib(name, None, [str(root / "include")], [host[0]], ["-lnvshmem_device", host[1]], ["-rdc=true"])
    raise Unavailable(f"unknown library {name!r} (known: {', '.join(LINKABLE)})")
