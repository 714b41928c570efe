"""The hidden build of a native candidate: the recipe from problem.yaml's `build`, libraries
resolved on this machine, a cache shared by xdist workers, and compiler messages mapped back to
template lines.

Cache: <dir>/<key[:2]>/<key>/ holding lib.so (on success) and build.json (command, log, seconds),
key = sha256 of (spliced source, recipe, resolved flags, compiler version, machine). A filelock per
key makes concurrent builds of one candidate wait for one compile. Compiler errors are cached too
(the same text fails the same way); a build that ran out of time is not.
Runs in the pytest process; the compiler is a subprocess, no candidate code is imported here.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock

from ..protocol import atomic_write

if TYPE_CHECKING:
    from .regions import LineMap

VERSION = 1
COMPILERS = {"nvcc": "nvcc", "g++": "g++"}
SUFFIX = {"nvcc": ".cu", "g++": ".cpp"}
# what a recipe may name in build.libraries (programmer-facing names; the prompt lists them)
LINKABLE = ("cudart", "cuda", "nccl", "nccl_device", "nvshmem", "pthread", "rt")
MESSAGE_LINES = 40


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


@dataclass
class Lib:
    name: str
    version: str | None = None
    include: list = field(default_factory=list)
    libdirs: list = field(default_factory=list)
    link: list = field(default_factory=list)      # linker arguments (-lfoo, -l:libfoo.so.2)
    flags: list = field(default_factory=list)     # compiler flags the library needs (-rdc=true)


@dataclass
class BuildResult:
    ok: bool
    lib: str | None
    seconds: float
    cached: bool
    key: str
    message: str = ""            # mapped compiler messages (failures), for people and models
    command: list = field(default_factory=list)


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
    parts = [re.search(rf"#define NCCL_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return "NCCL " + ".".join(p.group(1) for p in parts) if all(parts) else None


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


def command(recipe: Recipe, source: Path, out: Path, libs: list) -> list:
    cmd = [COMPILERS[recipe.compiler], *recipe.flags]
    for lib in libs:
        cmd += lib.flags + [f"-I{d}" for d in lib.include]
    if recipe.compiler == "nvcc":
        cmd += ["-shared", "-Xcompiler", "-fPIC", "-o", str(out), str(source)]
        for lib in libs:
            cmd += [f"-L{d}" for d in lib.libdirs] + lib.link + [f"-Xlinker=-rpath,{d}" for d in lib.libdirs]
    else:
        cmd += ["-shared", "-fPIC", "-o", str(out), str(source)]
        for lib in libs:
            cmd += [f"-L{d}" for d in lib.libdirs] + lib.link + [f"-Wl,-rpath,{d}" for d in lib.libdirs]
    return cmd


def cache_key(source: str, recipe: Recipe, libs: list) -> str:
    blob = {"v": VERSION, "source": source, "recipe": asdict(recipe), "libs": [asdict(lib) for lib in libs],
            "compiler": compiler_version(recipe.compiler), "machine": [platform.node(), platform.machine()]}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


# ---- building --------------------------------------------------------------------------------------
def build(source: str, recipe: Recipe, cache_dir: Path, filename: str, linemap: LineMap | None = None,
          timeout_s: float = 600.0) -> BuildResult:
    """Build `source` (the spliced file, built under the template's file name) into a shared
    library, or find it built. Raises Unavailable when the compiler or a library is missing."""
    if compiler_version(recipe.compiler) is None:
        raise Unavailable(f"the compiler {recipe.compiler} is not on this machine")
    libs = [resolve(name) for name in recipe.libraries]
    key = cache_key(source, recipe, libs)
    final = Path(cache_dir) / key[:2] / key
    final.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with FileLock(str(final) + ".lock", timeout=timeout_s + 60):
        done = _read(final / "build.json")
        if done is not None:
            return BuildResult(done["ok"], str(final / "lib.so") if done["ok"] else None,
                               time.monotonic() - t0, True, key, done.get("message", ""), done.get("command", []))
        work = final.with_name(f"{key}.tmp-{os.getpid()}")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        (work / filename).write_text(source)
        cmd = command(recipe, work / filename, work / "lib.so", libs)
        ok, log, timed_out = _compile(cmd, work, timeout_s)
        seconds = time.monotonic() - t0
        message = "" if ok else map_messages(log, work, filename, linemap)
        if timed_out:
            message = f"the build took longer than {timeout_s:.0f} s and was stopped"
        record = {"ok": ok, "seconds": seconds, "command": _shown(cmd, work), "log": log[-20000:], "message": message}
        atomic_write(work / "build.json", json.dumps(record, indent=1))
        if timed_out:
            shutil.rmtree(work, ignore_errors=True)      # not cached: a loaded machine may do better
        else:
            shutil.rmtree(final, ignore_errors=True)
            os.replace(work, final)
        return BuildResult(ok, str(final / "lib.so") if ok else None, seconds, False, key, message, record["command"])


def _compile(cmd: list, cwd: Path, timeout_s: float) -> tuple[bool, str, bool]:
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)      # the compiler's own children (cicc, ptxas) too
        out, _ = proc.communicate()
        return False, out or "", True
    return proc.returncode == 0, out or "", False


def _shown(cmd: list, work: Path) -> list:
    return [a.replace(str(work) + os.sep, "") for a in cmd]


def map_messages(log: str, work: Path, filename: str, linemap: LineMap | None = None) -> str:
    """Compiler output with the build folder's paths dropped and every `<file>:LINE` / `<file>(LINE)`
    of the spliced source named as the template line or the region line it is."""
    text = log.replace(str(work) + os.sep, "")
    pat = re.compile(rf"(?<![\w./-]){re.escape(filename)}(?::(\d+)|\((\d+)\))")

    def sub(m: re.Match[str]) -> str:
        line = int(m.group(1) or m.group(2))
        return linemap.describe(line, filename) if linemap is not None else f"{filename}:{line}"
    lines = [pat.sub(sub, ln) for ln in text.splitlines() if ln.strip()]
    errors = [i for i, ln in enumerate(lines) if "error" in ln.lower()]
    start = max(0, errors[0] - 2) if errors else 0
    shown = lines[start:start + MESSAGE_LINES]
    more = len(lines) - start - len(shown)
    return "\n".join(shown) + (f"\n[... {more} more lines]" if more > 0 else "")


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
