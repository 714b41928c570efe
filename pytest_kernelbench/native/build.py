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

import hashlib
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


from ..protocol import atomic_write
from .toolchain import COMPILERS, LINKABLE, SUFFIX, Lib, Recipe, Unavailable, compiler_version, resolve  # noqa: F401 (the recipe's names)

if TYPE_CHECKING:
    from .regions import LineMap

VERSION = 1
MESSAGE_LINES = 40


@dataclass
class BuildResult:
    ok: bool
    lib: str | None
    seconds: float
    cached: bool
    key: str
    message: str = ""            # mapped compiler messages (failures), for people and models
    command: list = field(default_factory=list)


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
    from filelock import FileLock  # here, not at import: the plugin loads without its runtime packages
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
        shown = _shown(cmd, work)
        record = {"ok": ok, "seconds": seconds, "command": shown, "log": log[-20000:], "message": message}
        atomic_write(work / "build.json", json.dumps(record, indent=1))
        if timed_out:
            shutil.rmtree(work, ignore_errors=True)      # not cached: a loaded machine may do better
        else:
            shutil.rmtree(final, ignore_errors=True)
            os.replace(work, final)
        return BuildResult(ok, str(final / "lib.so") if ok else None, seconds, False, key, message, shown)


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
