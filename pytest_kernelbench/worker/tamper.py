"""Tampering: functions the harness relies on (clocks, synchronize, events, comparisons, the
harness's own modules and their code objects, torch.Tensor's methods, the stdlib pieces the
harness uses) are snapshotted before the candidate is imported, and so is global torch state
(dispatch/function modes left active, default dtype, grad/inference mode, autocast, TF32 and
reduced-precision flags, current device/stream). After each candidate phase anything changed is
restored and reported."""
from __future__ import annotations

import sys
import threading
import warnings
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

if TYPE_CHECKING:
    from collections.abc import Callable


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
HARNESS_MODULES = ("main", "guards", "tamper", "shield", "clocks", "compare", "timing", "files", "native", "exchange")
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


def _is_watchable(v: object) -> bool:
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
    def _name(owner: object, attr: str) -> str:
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
        steps: list[Callable[..., object]] = [lambda: torch.set_default_dtype(s["default dtype"]),
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
