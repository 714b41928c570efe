"""What a candidate may not do inside a rank, and how we notice.

- Forbidden API families, watched in three layers. (1) torch.distributed functions and the
  functional-collective functions are wrapped with counters; (2) so are the ProcessGroup and
  Backend methods (dist.group.WORLD.allreduce, pg._get_backend(dev).allreduce: the latter never
  reaches the dispatcher); both are cheap and on for every candidate call, timed ones included.
  (3) Correctness calls also run under a TorchDispatchMode that sees every c10d /
  functional-collective / symm_mem dispatcher op however it was reached (torch.ops included).
  The harness's own barriers and object gathers are marked and never counted.
- Tampering: functions the harness relies on (clocks, synchronize, events, comparisons, the
  harness's own modules and their code objects, torch.Tensor's methods, the stdlib pieces the
  harness uses) are snapshotted before the candidate is imported, and so is global torch state
  (dispatch/function modes left active, default dtype, grad/inference mode, autocast, TF32 and
  reduced-precision flags, current device/stream). After each candidate phase anything changed
  is restored and reported.
- Hidden files: an audit hook (which Python code cannot remove) refuses and records, while the
  candidate runs, any access to the problem tree (open, listdir/scandir, link/rename/remove,
  chmod, copy, ...) and to the job's control files (job.json, result.json, done/, error/, hb/),
  child processes whose command line names those paths, replacing the __code__ of a harness or
  stdlib function, and the introspection calls that reach the harness's own objects
  (gc.get_objects/get_referrers, sys._current_frames, sys.settrace/setprofile, sys._getframe
  into a harness frame). Not covered: walking frame.f_back from the candidate's own frame (no
  audit event exists for it); the reference runs after the candidate on the same inputs, so such
  a walk finds no answer for the inputs in hand, only the harness's machinery.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from pathlib import Path
from types import MappingProxyType

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

HARNESS_DIR = str(Path(__file__).resolve().parent) + os.sep
BUNDLED_PROBLEMS = Path(__file__).resolve().parents[2] / "problems"   # the package's own problem tree

COLLECTIVE_FUNCS = (
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "all_gather_coalesced", "_all_gather_base", "all_gather_single", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_single",
    "_reduce_scatter_base", "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list",
    "reduce", "gather", "gather_object", "scatter", "scatter_object_list", "barrier", "monitored_barrier",
)
P2P_FUNCS = ("send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list")
# ProcessGroup / Backend (pybind) methods that move data
PG_P2P = ("send", "recv", "recv_anysource")
PG_COLLECTIVES = (
    "broadcast", "allreduce", "allreduce_coalesced", "reduce", "allgather", "all_gather_single", "_allgather_base",
    "allgather_coalesced", "all_gather_single_coalesced", "allgather_into_tensor_coalesced", "gather", "scatter",
    "reduce_scatter", "reduce_scatter_single", "_reduce_scatter_base", "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced", "all_to_all_single", "alltoall_base", "alltoall", "barrier", "monitored_barrier",
)
FUNCOL_FUNCS = (
    "all_reduce", "all_reduce_coalesced", "all_reduce_inplace", "all_gather_tensor", "all_gather_tensor_autograd",
    "all_gather_tensor_inplace", "all_gather_into_tensor_coalesced", "all_gather_inplace", "reduce_scatter_tensor",
    "reduce_scatter_tensor_autograd", "reduce_scatter_tensor_coalesced", "all_to_all_single",
    "all_to_all_single_autograd", "all_to_all_inplace", "broadcast", "permute_tensor",
)
# symm_mem dispatcher ops that are allocation/rendezvous plumbing, not ready-made collectives.
SYMM_MEM_ALLOWED = frozenset({"empty", "empty_strided_p2p", "rendezvous", "get_remote_tensors", "set_signal_pad_size",
                              "get_signal_pad_size", "stream_write_value32_", "memset32_", "is_nvshmem_available",
                              "set_backend", "get_backend"})
# functional-collective bookkeeping ops that move no data
IGNORED_OPS = frozenset({"wait_tensor", "_wrap_tensor_autograd"})

_tls = threading.local()


class harness_call:
    """Marks collectives the harness itself issues (barriers, object gathers) so that they are
    never counted against the candidate, even inside a timed candidate round."""

    def __enter__(self):
        _tls.depth = getattr(_tls, "depth", 0) + 1

    def __exit__(self, *exc):
        _tls.depth -= 1


def _by_harness() -> bool:
    return getattr(_tls, "depth", 0) > 0


def family_of_op(namespace: str, name: str) -> str | None:
    if namespace in ("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd"):
        if name in IGNORED_OPS:
            return None
        return "p2p" if name.startswith(("send", "recv")) else "collectives"
    if namespace == "symm_mem":
        return None if name in SYMM_MEM_ALLOWED else "symm_mem_ops"
    return None


class ForbidGuard:
    """Counts forbidden calls made while `active`; reference calls run with it inactive."""

    def __init__(self, families):
        self.families = set(families)
        self.active = False
        self.calls: dict[str, int] = {}
        self.originals: dict[str, object] = {}

    def record(self, what: str):
        self.calls[what] = self.calls.get(what, 0) + 1

    def install(self):
        import torch.distributed.distributed_c10d as c10d
        wanted = {}
        if "collectives" in self.families:
            wanted.update({f: "collectives" for f in COLLECTIVE_FUNCS})
        if "p2p" in self.families:
            wanted.update({f: "p2p" for f in P2P_FUNCS})
        for name, family in wanted.items():
            original = getattr(c10d, name, None) or getattr(dist, name, None)
            if original is None:
                continue
            self.originals[name] = original
            wrapper = self._wrap(f"torch.distributed.{name} ({family})", original)
            for module in (dist, c10d):
                if hasattr(module, name):
                    setattr(module, name, wrapper)
        if "collectives" in self.families:
            try:
                import torch.distributed._functional_collectives as funcol
            except ImportError:
                funcol = None
            for name in FUNCOL_FUNCS if funcol is not None else ():
                if callable(getattr(funcol, name, None)):
                    setattr(funcol, name, self._wrap(f"torch.distributed._functional_collectives.{name} (collectives)",
                                                     getattr(funcol, name)))
        self._wrap_process_groups()

    def _wrap(self, label, original):
        guard = self

        def wrapper(*args, **kwargs):
            if guard.active and not _by_harness():
                guard.record(label)
            return original(*args, **kwargs)

        wrapper.__name__ = getattr(original, "__name__", "wrapper")
        wrapper.__doc__ = getattr(original, "__doc__", None)
        return wrapper

    def _wrap_process_groups(self):
        """ProcessGroup and Backend methods, on the classes (pybind types accept new attributes)."""
        try:
            from torch._C._distributed_c10d import Backend, ProcessGroup
        except ImportError:
            return
        methods = {}
        if "collectives" in self.families:
            methods.update({m: "collectives" for m in PG_COLLECTIVES})
        if "p2p" in self.families:
            methods.update({m: "p2p" for m in PG_P2P})
        guard = self
        classes, todo = [], [ProcessGroup, Backend]
        while todo:       # the backends (ProcessGroupGloo, ProcessGroupNCCL, ...) and their subclasses
            cls = todo.pop()
            if cls not in classes:
                classes.append(cls)
                todo.extend(cls.__subclasses__())
        for cls in classes:
            for name, family in methods.items():
                raw = cls.__dict__.get(name)
                if raw is None or getattr(raw, "_kb_wrapped", False):
                    continue
                label = f"{cls.__name__}.{name} ({family})"

                def method(self_, *args, _kb_raw=raw, _kb_label=label, **kwargs):
                    if guard.active and not _by_harness():
                        guard.record(_kb_label)
                    return _kb_raw.__get__(self_, type(self_))(*args, **kwargs)

                method.__name__ = name
                method._kb_wrapped = True
                try:
                    setattr(cls, name, method)
                except (TypeError, AttributeError):
                    pass

    def dispatch_mode(self):
        # TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._disable_dynamo, whose
        # first call imports torch._dynamo (seconds of CPU per rank). A candidate that already
        # uses torch.compile has paid that; otherwise take the plain mode.
        cls = _ForbidMode if "torch._dynamo" in sys.modules else _ForbidModeNoDynamo
        return cls(self)


def _forbid_dispatch(self, func, types, args=(), kwargs=None):
    ns = getattr(func, "namespace", "")
    name = func._schema.name.split("::")[-1] if hasattr(func, "_schema") else str(func)
    family = family_of_op(ns, name)
    if family and family in self.guard.families and not _by_harness():
        self.guard.record(f"torch.ops.{ns}.{name} ({family})")
    return func(*args, **(kwargs or {}))


class _ForbidMode(TorchDispatchMode):
    def __init__(self, guard: ForbidGuard):
        super().__init__()
        self.guard = guard

    __torch_dispatch__ = _forbid_dispatch


class _ForbidModeNoDynamo(_ForbidMode):
    pass


_ForbidModeNoDynamo.__torch_dispatch__ = _forbid_dispatch   # set after class creation: not wrapped


# ---- tampering -----------------------------------------------------------------------------------
_MISSING = object()
# torch names the harness (or a comparison) uses; the rest of torch's namespace is not watched
# because torch itself patches a few attributes lazily (torch._dynamo wraps torch.manual_seed)
TORCH_NAMES = ("equal", "isnan", "isinf", "isfinite", "allclose", "isclose", "abs", "empty", "empty_like", "zeros",
               "zeros_like", "ones", "ones_like", "tensor", "as_tensor", "Generator", "Tensor", "where", "cat", "stack",
               "float32", "float16", "bfloat16", "strided", "device", "dtype", "set_num_threads",
               "get_default_dtype", "set_default_dtype", "is_grad_enabled", "set_grad_enabled")
CUDA_NAMES = ("synchronize", "Event", "Stream", "current_stream", "current_device", "set_device", "set_stream",
              "get_device_properties", "is_available", "is_initialized", "device_count")
HARNESS_MODULES = ("main", "guards", "compare", "timing", "files")
STDLIB_MODULES = ("builtins", "time", "os", "posixpath", "threading", "statistics", "math", "json", "hashlib",
                  "hmac", "pickle", "io", "traceback", "numbers", "secrets", "datetime")


def _watched_owners():
    """(owner, kind) pairs: kind 'module' watches callables/classes, 'class' watches every entry
    and entries added later (a new Tensor.__gt__ shadows the C method), 'names' a fixed list."""
    import importlib
    owners = []
    for name in STDLIB_MODULES:
        try:
            owners.append((importlib.import_module(name), "module"))
        except ImportError:
            pass
    owners += [(threading.Thread, "class"), (threading.Event, "class"), (torch, TORCH_NAMES), (torch.Tensor, "class"),
               (torch.testing, "module"), (dist, "module"), (TorchDispatchMode, "class")]
    import torch.distributed.distributed_c10d as c10d
    import torch.utils._python_dispatch as pd
    owners += [(c10d, "module"), (pd, "module")]
    try:
        from torch._C._distributed_c10d import Backend, ProcessGroup, Work
        owners += [(ProcessGroup, "class"), (Backend, "class"), (Work, "class")]
        owners += [(c, "class") for c in Backend.__subclasses__()]
    except ImportError:
        pass
    owners += [(torch.cuda, CUDA_NAMES), (torch.cuda.Event, "class"), (torch.cuda.Stream, "class")]
    owners.append((torch._C, ("_cuda_synchronize", "_len_torch_dispatch_stack", "_len_torch_function_stack")))
    # the harness itself: every module of this package (all imported now, so that none is added
    # later), its classes and their functions' code
    pkg = __name__.rsplit(".", 1)[0]
    for sub in HARNESS_MODULES:
        importlib.import_module(f"{pkg}.{sub}")
    for mod_name, mod in list(sys.modules.items()):
        if mod is not None and (mod_name == pkg or mod_name.startswith(pkg + ".")):
            owners.append((mod, "harness"))
            for v in list(vars(mod).values()):
                if isinstance(v, type) and v.__module__ == mod_name:
                    owners.append((v, "class"))
    return owners


def _is_watchable(v) -> bool:
    with warnings.catch_warnings():          # deprecated module attributes warn when touched
        warnings.simplefilter("ignore")
        return callable(v) or isinstance(v, (staticmethod, classmethod, property))


class TamperGuard:
    """Snapshot of harness-critical attributes and global torch state; `check()` restores and
    names whatever changed since."""

    def __init__(self):
        self.entries = []       # (owner, attr, value)
        self.classes = []       # (cls, keys at snapshot)
        self.codes = []         # (function, __code__, __defaults__, __kwdefaults__)
        self.modules = []       # (sys.modules key, module)
        seen_funcs = set()
        for owner, kind in _watched_owners():
            d = vars(owner)
            if isinstance(kind, tuple):
                items = [(k, d.get(k, _MISSING)) for k in kind]
                items = [(k, v) for k, v in items if v is not _MISSING]
            elif kind == "class":
                items = list(d.items())
                self.classes.append((owner, frozenset(d)))
            elif kind == "harness":
                # every binding: a module-level name rebound (or a builtin shadowed by a new
                # global) changes what the harness's code does
                items = list(d.items())
                self.modules.append((owner.__name__, owner))
                self.classes.append((owner, frozenset(d)))
            else:
                items = [(k, v) for k, v in d.items() if _is_watchable(v) and type(v) is not type(sys)]
            for k, v in items:
                self.entries.append((owner, k, v))
                if kind in ("harness", "class") and getattr(owner, "__module__", getattr(owner, "__name__", "")).startswith(
                        __name__.rsplit(".", 1)[0]):
                    f = v.__func__ if isinstance(v, (staticmethod, classmethod)) else v
                    if hasattr(f, "__code__") and id(f) not in seen_funcs:
                        seen_funcs.add(id(f))
                        self.codes.append((f, f.__code__, f.__defaults__, f.__kwdefaults__))
        self.state = GlobalState()

    @staticmethod
    def _name(owner, attr):
        return f"{getattr(owner, '__name__', type(owner).__name__)}.{attr}"

    def check(self) -> list[str]:
        changed = []
        for owner, attr, original in self.entries:
            now = vars(owner).get(attr, _MISSING)
            if now is not original:
                changed.append(self._name(owner, attr))
                try:
                    setattr(owner, attr, original)
                except (TypeError, AttributeError):
                    pass
        for cls, keys in self.classes:
            for attr in set(vars(cls)) - keys:
                if isinstance(cls, type(sys)) and attr.startswith("__") and attr.endswith("__"):
                    continue        # __warningregistry__ appears when harness code warns
                changed.append(self._name(cls, attr))
                try:
                    delattr(cls, attr)
                except (TypeError, AttributeError):
                    pass
        for f, code, defaults, kwdefaults in self.codes:
            if f.__code__ is not code or f.__defaults__ is not defaults or f.__kwdefaults__ is not kwdefaults:
                changed.append(f"{f.__module__}.{f.__qualname__}.__code__")
                f.__code__, f.__defaults__, f.__kwdefaults__ = code, defaults, kwdefaults
        for name, mod in self.modules:
            if sys.modules.get(name) is not mod:
                changed.append(f"sys.modules[{name!r}]")
                sys.modules[name] = mod
        changed += self.state.check()
        return changed


class GlobalState:
    """Process-wide torch settings a candidate could leave changed for the reference and the check
    (a dispatch mode that rewrites comparisons; TF32 or autocast that degrades the reference)."""

    def __init__(self):
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.snapshot = self.read()
        if self.cuda:
            self.stream = torch.cuda.current_stream()

    def read(self) -> dict:
        s = {"dispatch modes left active": torch._C._len_torch_dispatch_stack(),
             "torch function modes left active": torch._C._len_torch_function_stack(),
             "default dtype": torch.get_default_dtype(),
             "inference mode": torch.is_inference_mode_enabled(),
             "float32 matmul precision": torch.get_float32_matmul_precision(),
             "deterministic algorithms": torch.are_deterministic_algorithms_enabled()}
        for flag in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
            try:
                s[f"torch.backends.cuda.matmul.{flag}"] = getattr(torch.backends.cuda.matmul, flag)
            except Exception:  # noqa: BLE001 - flag missing in this torch
                pass
        try:
            s["torch.backends.cudnn.allow_tf32"] = torch.backends.cudnn.allow_tf32
        except Exception:  # noqa: BLE001
            pass
        for dev in ("cpu", "cuda"):
            try:
                s[f"autocast {dev}"] = torch.is_autocast_enabled(dev)
            except Exception:  # noqa: BLE001 - older torch: no device argument
                pass
        if getattr(self, "cuda", False):
            s["current CUDA device"] = torch.cuda.current_device()
            s["current CUDA stream"] = torch.cuda.current_stream().cuda_stream
        return s

    def check(self) -> list[str]:
        now = self.read()
        changed = [f"global state: {k} {v!r} -> {now.get(k)!r}" for k, v in self.snapshot.items() if now.get(k) != v]
        if changed:
            self.restore(now)
        return changed

    def restore(self, now: dict):
        s = self.snapshot
        from torch.utils._python_dispatch import _pop_mode
        for _ in range(64):
            if torch._C._len_torch_dispatch_stack() <= s["dispatch modes left active"]:
                break
            try:
                _pop_mode()
            except Exception:  # noqa: BLE001
                break
        for _ in range(64):
            if torch._C._len_torch_function_stack() <= s["torch function modes left active"]:
                break
            try:
                torch._C._pop_torch_function_stack()
            except Exception:  # noqa: BLE001
                break
        steps = [lambda: torch.set_default_dtype(s["default dtype"]),
                 lambda: torch.set_float32_matmul_precision(s["float32 matmul precision"]),
                 lambda: torch.use_deterministic_algorithms(s["deterministic algorithms"])]
        for flag in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
            key = f"torch.backends.cuda.matmul.{flag}"
            if key in s:
                steps.append(lambda flag=flag, key=key: setattr(torch.backends.cuda.matmul, flag, s[key]))
        if "torch.backends.cudnn.allow_tf32" in s:
            steps.append(lambda: setattr(torch.backends.cudnn, "allow_tf32", s["torch.backends.cudnn.allow_tf32"]))
        for dev in ("cpu", "cuda"):
            if f"autocast {dev}" in s:
                steps.append(lambda dev=dev: torch.set_autocast_enabled(dev, s[f"autocast {dev}"]))
        if self.cuda:
            steps.append(lambda: torch.cuda.set_device(s["current CUDA device"]))
            steps.append(lambda: torch.cuda.set_stream(self.stream))
        for step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001 - best effort; the item fails anyway
                pass


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


def _strings(v):
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

    def __init__(self, protected, job_dir=None):
        dirs = [str(p) for p in protected]
        if BUNDLED_PROBLEMS.is_dir():
            dirs.append(str(BUNDLED_PROBLEMS))
        files = []
        if job_dir:
            dirs += [os.path.join(job_dir, d) for d in ("done", "error", "hb")]
            files += [os.path.join(job_dir, f) for f in ("job.json", "result.json", "secret")]
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

    def _hook(self, event, args):
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


class ClockSet:
    """The harness's own handles on clocks and synchronization, captured before any candidate runs."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"
        self.perf_counter = time.perf_counter
        self._barrier = dist.barrier
        self._all_gather_object = dist.all_gather_object
        self.enumerate_threads = threading.enumerate
        if self.cuda:
            self._c_sync = torch._C._cuda_synchronize
            self.Event = torch.cuda.Event
            self._record = torch.cuda.Event.record
            self._elapsed = torch.cuda.Event.elapsed_time
            self._ev_sync = torch.cuda.Event.synchronize
        self.baseline_threads = set(threading.enumerate())

    def barrier(self):
        with harness_call():
            self._barrier()

    def all_gather_object(self, out, obj):
        with harness_call():
            self._all_gather_object(out, obj)

    def sync(self, thread_wait_s: float = 10.0) -> list[str]:
        """Device-wide synchronize; on CPU, wait for threads the candidate started (the CPU
        analogue of a side stream). Returns the names of threads still running after the wait."""
        if self.cuda:
            self._c_sync()
        return self.wait_threads(thread_wait_s)

    def wait_threads(self, limit_s: float) -> list[str]:
        deadline = self.perf_counter() + limit_s
        while True:
            extra = [t for t in self.enumerate_threads() if t not in self.baseline_threads and t.is_alive()]
            if not extra or self.perf_counter() > deadline:
                return [t.name for t in extra]
            for t in extra:
                t.join(max(0.0, min(0.05, deadline - self.perf_counter())))

    def event(self):
        return self.Event(enable_timing=True)

    def record(self, ev):
        self._record(ev)

    def elapsed_s(self, start, end) -> float:
        self._ev_sync(end)
        return self._elapsed(start, end) / 1000.0
