"""What a candidate may not do inside a rank, and how we notice.

- Forbidden API families, watched in three layers. (1) torch.distributed functions and the
  functional-collective functions are wrapped with counters; (2) so are the ProcessGroup and
  Backend methods (dist.group.WORLD.allreduce, pg._get_backend(dev).allreduce: the latter never
  reaches the dispatcher); both are cheap and on for every candidate call, timed ones included.
  (3) Correctness calls also run under a TorchDispatchMode that sees every c10d /
  functional-collective / symm_mem dispatcher op however it was reached (torch.ops included).
  The harness's own barriers and object gathers are marked and never counted.
Tampering is watched in tamper.py, hidden files in shield.py, clocks in clocks.py.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

if TYPE_CHECKING:
    from torch._ops import OpOverload


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

    def __exit__(self, *exc: object) -> None:
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

    def __init__(self, families: Iterable[str]) -> None:
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

    def _wrap(self, label: str, original: Callable[..., Any]) -> Callable[..., Any]:
        guard = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
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

                def method(self_: Any, *args: Any, _kb_raw: Any = raw, _kb_label: str = label, **kwargs: Any) -> Any:
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


def _forbid_dispatch(self: _ForbidMode, func: OpOverload, types: tuple[type, ...], args: tuple = (),
                     kwargs: dict | None = None) -> Any:
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
