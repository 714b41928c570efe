"""NVLink multicast stays off inside a rank (see ..safety: the launcher's variables and the text
scan). Installed before the candidate is imported and active for the rest of the process:

- an audit hook (Python code cannot remove it) refuses, with PermissionError, and records:
  os.putenv / os.unsetenv of a guarded variable (os.environ[...] = ..., del os.environ[...]);
  child processes started with a guarded variable changed or dropped from their environment;
  ctypes symbol lookups (ctypes.dlsym, ctypes.dlsym/handle) of cuMulticast* or any multicast /
  multimem / NVLS name, of the libc environment writers (setenv, putenv, unsetenv, clearenv) and
  of the by-name entry-point getters (cuGetProcAddress, cudaGetDriverEntryPoint, dlsym, dlvsym);
- cuda-python and CuPy modules (cuda.*, cupy*, nvshmem*): when imported (a sys.meta_path finder
  whose loaders patch the module; the hook puts the finder back first on every import), their
  multicast attributes and by-name entry-point getters are replaced by stubs that refuse and record;
- check(): the guarded variables compared with their values at install, through os.environ and
  through libc getenv (looked up before the hook is armed), so changes made behind Python's back
  (os.environ._data, C code) are found too.
Not covered: C/C++ code (load_inline, a shared library) calling the driver's multicast API or
setenv directly, and other FFIs (cffi); the pytest-side text scan and check() are the nets there.
"""
from __future__ import annotations

import importlib.abc
import os
import re
import sys
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..protocol import GUARDED_ENV, MULTICAST_OFF

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

WATCHED_MODULES = re.compile(r"^(cuda|cupy|cupy_backends|cupyx|nvshmem)(\.|$)")
MULTICAST_NAME = re.compile(r"multicast|multimem|nvls", re.IGNORECASE)
ENTRY_POINT_GETTERS = ("cuGetProcAddress", "cudaGetDriverEntryPoint")
REFUSED_SYMBOLS = frozenset({"setenv", "putenv", "unsetenv", "clearenv", "dlsym", "dlvsym"})
CHILD_EVENTS = {"subprocess.Popen": 3, "os.exec": 2, "os.posix_spawn": 2, "os.spawn": 3}   # event -> env position


def _text(v: object) -> str | None:
    if isinstance(v, (str, bytes, os.PathLike)):
        try:
            return os.fsdecode(v)
        except TypeError:
            return None
    return None


def refused_symbol(name: object) -> bool:
    name = _text(name)
    if not name:
        return False
    return (bool(MULTICAST_NAME.search(name)) or name in REFUSED_SYMBOLS
            or name.startswith(ENTRY_POINT_GETTERS))


class MulticastGuard:
    def __init__(self, names: Iterable[str] = GUARDED_ENV) -> None:
        import ctypes
        self.names = tuple(names)
        self.findings: list[str] = []
        self.defused: weakref.WeakSet[ModuleType] = weakref.WeakSet()
        self.start = {n: os.environ.get(n) for n in self.names}
        try:
            getenv = ctypes.CDLL(None).getenv
            getenv.restype = ctypes.c_char_p
            getenv.argtypes = [ctypes.c_char_p]
            self._getenv: Callable[[bytes], bytes | None] | None = getenv
        except (OSError, AttributeError):
            self._getenv = None
        self.start_libc = {n: self._libc(n) for n in self.names}
        self.finder = _Finder(self)
        # called before the process changes another variable of its environment (rank/sealenv.py:
        # libc writes the sealed environ array in place otherwise)
        self.before_env_change: Callable[[], None] | None = None

    def _libc(self, name: str):
        if self._getenv is None:
            return None
        v = self._getenv(name.encode())
        return None if v is None else os.fsdecode(v)

    # ---- arming ------------------------------------------------------------------------------
    def install(self):
        for name, mod in list(sys.modules.items()):
            if WATCHED_MODULES.match(name) and mod is not None:
                self.defuse(mod)
        sys.meta_path.insert(0, self.finder)
        sys.addaudithook(self._hook)

    def _refuse(self, what: str):
        self.findings.append(what)
        raise PermissionError(f"kernelbench: NVLink multicast is never allowed on this machine: {what}")

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event in ("os.putenv", "os.unsetenv"):
            key = _text(args[0]) if args else None
            if key in self.names:
                self._refuse(f"{'set' if event == 'os.putenv' else 'unset'} {key}")
            if self.before_env_change is not None:
                self.before_env_change()
        elif event in ("ctypes.dlsym", "ctypes.dlsym/handle"):
            if len(args) > 1 and refused_symbol(args[1]):
                self._refuse(f"looked up {_text(args[1])!r} through ctypes")
        elif event in CHILD_EVENTS:
            i = CHILD_EVENTS[event]
            env = args[i] if i < len(args) else None
            if env is not None:
                changed = self._child_env(env)
                if changed:
                    self._refuse(f"started a child process with {changed}")
        elif event == "import" and args and WATCHED_MODULES.match(str(args[0])):
            meta = sys.meta_path
            if isinstance(meta, list) and (not meta or meta[0] is not self.finder):
                if self.finder in meta:
                    meta.remove(self.finder)
                meta.insert(0, self.finder)

    def _child_env(self, env: Any) -> str | None:
        try:
            items = {_text(k): _text(v) for k, v in dict(env).items()}
        except Exception:  # noqa: BLE001 - an odd mapping: judged by the child, not here
            return None
        for n in self.names:
            want, got = self.start[n], items.get(n)
            if got == want:
                continue
            if n in MULTICAST_OFF:
                return f"{n}={got!r}" if got is not None else f"{n} removed"
            if n == "CUDA_VISIBLE_DEVICES" and got is not None:   # a subset of this job's GPUs is fine
                if want is None or not set(got.split(",")) <= set(want.split(",")):
                    return f"{n}={got!r}"
        return None

    # ---- cuda-python / CuPy ------------------------------------------------------------------
    def defuse(self, module: ModuleType) -> None:
        if module in self.defused:
            return
        self.defused.add(module)
        modname = getattr(module, "__name__", "?")
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            if attr.startswith("__") or not callable(value):     # constants (enum values) do nothing
                continue
            if MULTICAST_NAME.search(attr) or attr.startswith(ENTRY_POINT_GETTERS):
                try:
                    setattr(module, attr, self._stub(f"{modname}.{attr}"))
                except (AttributeError, TypeError):
                    pass

    def _stub(self, qualname: str):
        refuse = self._refuse

        def refused(*args: Any, **kwargs: Any) -> None:
            refuse(f"called {qualname}")
        refused.__name__ = refused.__qualname__ = qualname.rsplit(".", 1)[-1]
        return refused

    # ---- integrity ---------------------------------------------------------------------------
    def check(self) -> str | None:
        """What was refused or changed so far (then reset), or None."""
        found = list(dict.fromkeys(self.findings))
        self.findings.clear()
        for n in self.names:
            now = os.environ.get(n)
            if now != self.start[n]:
                found.append(f"{n} changed in os.environ: {self.start[n]!r} -> {now!r}")
            libc = self._libc(n)
            if self._getenv is not None and libc != self.start_libc[n]:
                found.append(f"{n} changed in the process environment (libc): {self.start_libc[n]!r} -> {libc!r}")
        if not found:
            return None
        shown = "; ".join(found[:6]) + (f" and {len(found) - 6} more" if len(found) > 6 else "")
        return f"tried to use or enable NVLink multicast (never allowed on this machine): {shown}"


class _Finder(importlib.abc.MetaPathFinder):
    """Finds cuda-python / CuPy modules through the other finders and wraps their loaders, so
    that each module is defused right after it runs."""

    def __init__(self, guard: MulticastGuard):
        self.guard = guard

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if not WATCHED_MODULES.match(name):
            return None
        for finder in list(sys.meta_path):
            if finder is self or isinstance(finder, _Finder):
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None and not isinstance(spec.loader, _Loader):
                    spec.loader = _Loader(spec.loader, self.guard)
                return spec
        return None


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, guard: MulticastGuard) -> None:
        self._inner = inner
        self._guard = guard

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        try:
            self._inner.exec_module(module)
        finally:
            self._guard.defuse(module)

    def __getattr__(self, name: str) -> Any:   # get_filename, is_package, get_resource_reader, ...
        return getattr(self._inner, name)
