"""What a candidate may not do inside a rank, and how we notice.

- Forbidden API families: torch.distributed functions are wrapped with counters (cheap, on for
  every candidate call), and correctness calls also run under a TorchDispatchMode that sees every
  c10d / functional-collective / symm_mem dispatcher op, however it was reached (getattr, the
  ProcessGroup object, torch.ops). The mode costs a Python call per op, so timed calls skip it.
- Tampering: functions the harness relies on (clocks, synchronize, events, comparisons) are
  captured before the candidate is imported; the harness calls the captured ones, and after each
  candidate phase any patched attribute is restored and reported.
- Hidden files: an audit hook (which Python code cannot remove) refuses and records any open()
  of the problem tree while the candidate is loaded.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

COLLECTIVE_FUNCS = (
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "all_gather_coalesced", "_all_gather_base", "all_gather_single", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_single",
    "_reduce_scatter_base", "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list",
    "reduce", "gather", "gather_object", "scatter", "scatter_object_list", "barrier", "monitored_barrier",
)
P2P_FUNCS = ("send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list")
# symm_mem dispatcher ops that are allocation/rendezvous plumbing, not ready-made collectives.
SYMM_MEM_ALLOWED = {"empty", "empty_strided_p2p", "rendezvous", "get_remote_tensors", "set_signal_pad_size",
                    "get_signal_pad_size", "stream_write_value32_", "memset32_", "is_nvshmem_available",
                    "set_backend", "get_backend"}
# functional-collective bookkeeping ops that move no data
IGNORED_OPS = {"wait_tensor", "_wrap_tensor_autograd"}


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
            wrapper = self._wrap(name, family, original)
            for module in (dist, c10d):
                if hasattr(module, name):
                    setattr(module, name, wrapper)

    def _wrap(self, name, family, original):
        guard = self

        def wrapper(*args, **kwargs):
            if guard.active:
                guard.record(f"torch.distributed.{name} ({family})")
            return original(*args, **kwargs)

        wrapper.__name__ = name
        wrapper.__wrapped__ = original
        return wrapper

    def dispatch_mode(self):
        return _ForbidMode(self)


class _ForbidMode(TorchDispatchMode):
    def __init__(self, guard: ForbidGuard):
        super().__init__()
        self.guard = guard

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ns = getattr(func, "namespace", "")
        name = func._schema.name.split("::")[-1] if hasattr(func, "_schema") else str(func)
        family = family_of_op(ns, name)
        if family and family in self.guard.families:
            self.guard.record(f"torch.ops.{ns}.{name} ({family})")
        return func(*args, **(kwargs or {}))


def _tamper_targets():
    targets = [(time, "perf_counter"), (time, "time"), (time, "monotonic"), (torch, "allclose"),
               (torch, "isclose"), (torch, "equal"), (torch, "isnan"), (torch, "isfinite"),
               (torch.testing, "assert_close"), (torch.Tensor, "__eq__"), (torch.Tensor, "abs"),
               (torch.Tensor, "float"), (torch.Tensor, "clone"), (torch.Tensor, "copy_"),
               (torch.Tensor, "data_ptr"), (torch.Tensor, "untyped_storage"),
               (torch.cuda, "synchronize"), (torch.cuda.Event, "elapsed_time"), (torch.cuda.Event, "record"),
               (torch.cuda.Event, "synchronize"), (torch._C, "_cuda_synchronize"), (os, "_exit"),
               (threading, "enumerate")]
    for name in ("barrier", "all_gather_object", "get_rank", "get_world_size"):
        targets.append((dist, name))
    return [(owner, attr) for owner, attr in targets if hasattr(owner, attr)]


class TamperGuard:
    """Snapshot of harness-critical attributes; `check()` restores and names what changed."""

    def __init__(self):
        self.snapshot = [(owner, attr, owner.__dict__.get(attr, getattr(owner, attr)))
                         for owner, attr in _tamper_targets()]

    def check(self) -> list[str]:
        changed = []
        for owner, attr, original in self.snapshot:
            now = owner.__dict__.get(attr, getattr(owner, attr, None))
            if now is not original:
                changed.append(f"{getattr(owner, '__name__', owner)}.{attr}")
                setattr(owner, attr, original)
        return changed


class FileShield:
    """Refuses opens under the protected folders while armed and remembers each attempt."""

    def __init__(self, protected):
        self.protected = [os.path.realpath(p) + os.sep for p in protected]
        self.armed = False
        self.attempts: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event, args):
        if not self.armed or event not in ("open", "os.listdir", "os.scandir"):
            return
        path = args[0] if args else None
        if isinstance(path, (bytes, os.PathLike)):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return
        real = os.path.realpath(path) + os.sep
        if any(real.startswith(p) for p in self.protected):
            self.attempts.append(path)
            raise PermissionError(f"kernelbench: the problem folder is not readable by candidates: {path}")


class ClockSet:
    """The harness's own handles on clocks and synchronization, captured before any candidate runs."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"
        self.perf_counter = time.perf_counter
        self.barrier = dist.barrier
        self.all_gather_object = dist.all_gather_object
        self.enumerate_threads = threading.enumerate
        if self.cuda:
            self._c_sync = torch._C._cuda_synchronize
            self.Event = torch.cuda.Event
            self._record = torch.cuda.Event.record
            self._elapsed = torch.cuda.Event.elapsed_time
            self._ev_sync = torch.cuda.Event.synchronize
        self.baseline_threads = set(threading.enumerate())

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
