"""Hidden files: an audit hook (which Python code cannot remove) refuses and records, while the
candidate runs, any access to the problem tree (open, listdir/scandir, link/rename/remove, chmod,
copy, ...) and to the job's control files (job.json, result.json, done/, error/, hb/), child
processes whose command line names those paths, replacing the __code__ of a harness or stdlib
function, and the introspection calls that reach the harness's own objects (gc.get_objects/
get_referrers, sys._current_frames, sys.settrace/setprofile, sys._getframe into a harness frame).
Not covered: walking frame.f_back from the candidate's own frame (no audit event exists for it);
the reference runs after the candidate on the same inputs, so such a walk finds no answer for the
inputs in hand, only the harness's machinery."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..protocol import JobLayout

HARNESS_DIR = str(Path(__file__).resolve().parent) + os.sep
BUNDLED_PROBLEMS = Path(__file__).resolve().parents[2] / "problems"   # the package's own problem tree

# ---- files and introspection -------------------------------------------------------------------
# audit event -> positions of its path arguments
PATH_EVENTS = MappingProxyType({
    "open": (0,), "os.listdir": (0,), "os.scandir": (0,), "os.fwalk": (0,), "os.link": (0, 1),
    "os.symlink": (0, 1), "os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,),
    "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,), "os.truncate": (0,), "os.chflags": (0,),
    "os.lchflags": (0,), "os.setxattr": (0,), "os.removexattr": (0,), "os.getxattr": (0,), "os.listxattr": (0,),
    "os.mkfifo": (0,), "os.mknod": (0,), "shutil.copyfile": (0, 1), "shutil.copymode": (0, 1),
    "shutil.copystat": (0, 1), "shutil.copytree": (0, 1), "shutil.rmtree": (0,), "shutil.move": (0, 1),
    "shutil.chown": (0,), "shutil.unpack_archive": (0, 1),
})
# audit event -> positions of its command arguments (checked for the protected paths by name)
COMMAND_EVENTS = MappingProxyType({"subprocess.Popen": (0, 1, 2), "os.system": (0,), "os.exec": (0, 1),
                                   "os.posix_spawn": (0, 1), "os.spawn": (1, 2), "pty.spawn": (0,)})
# ways to reach the harness's own objects (frames, every live object) from candidate code
INTROSPECTION_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
                                  "sys._current_exceptions", "sys.settrace", "sys.setprofile"})
STDLIB_DIR = os.path.dirname(os.__file__) + os.sep


def _strings(v: object) -> Iterator[str]:
    if isinstance(v, (str, bytes, os.PathLike)):
        try:
            yield os.fsdecode(v)
        except TypeError:
            pass
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _strings(x)


class FileShield:
    """While armed: refuses (PermissionError) and remembers every access to the protected folders
    and files, and the introspection calls that reach harness objects."""

    def __init__(self, protected: Iterable[str | os.PathLike[str]], job_dir: str | os.PathLike[str] | None = None) -> None:
        dirs = [str(p) for p in protected]
        if BUNDLED_PROBLEMS.is_dir():
            dirs.append(str(BUNDLED_PROBLEMS))
        files = []
        if job_dir:
            layout = JobLayout(job_dir)
            dirs += [str(d) for d in layout.control_dirs()]
            files += [str(f) for f in layout.control_files()]
        self.dirs = sorted({os.path.realpath(d) for d in dirs})
        self.files = {os.path.realpath(f) for f in files}
        # how these paths may be spelled in a command line
        self.needles = sorted({*self.dirs, *self.files, *(os.path.abspath(p) for p in dirs + files)})
        self.armed = False
        self.attempts: list[str] = []
        sys.addaudithook(self._hook)

    def blocked(self, path: str) -> bool:
        real = os.path.realpath(path)
        return real in self.files or any(real == d or real.startswith(d + os.sep) for d in self.dirs)

    def _refuse(self, what: str):
        self.attempts.append(what)
        raise PermissionError(f"kernelbench: candidates may not do this: {what}")

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed:
            return
        if event in PATH_EVENTS:
            for i in PATH_EVENTS[event]:
                if i < len(args):
                    for path in _strings(args[i]):
                        if self.blocked(path):
                            self._refuse(f"{event} {path}")
        elif event in COMMAND_EVENTS:
            for i in COMMAND_EVENTS[event]:
                if i < len(args):
                    for s in _strings(args[i]):
                        if any(n in s for n in self.needles):
                            self._refuse(f"{event} {s[:200]}")
        elif event in INTROSPECTION_EVENTS:
            self._refuse(event)
        elif event == "object.__setattr__" and len(args) > 1 and args[1] == "__code__":
            code = getattr(args[0], "__code__", None)
            if code is not None and code.co_filename.startswith((HARNESS_DIR, STDLIB_DIR)):
                self._refuse(f"patched the code of {getattr(args[0], '__qualname__', args[0])}")
        elif event == "sys._getframe" and args:
            code = getattr(args[0], "f_code", None)
            if code is not None and code.co_filename.startswith(HARNESS_DIR):
                self._refuse("sys._getframe into a harness frame")
