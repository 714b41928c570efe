"""Forbidden API families, counted in the candidate process (best effort: it is the candidate's own
process; what the OS enforces is in sandbox.py, and the verdict is the checker's). Three layers,
all cheap and on in every call alike (so no call can be told from another by them):
(1) torch.distributed functions and the functional-collective functions are wrapped with
counters; (2) so are the ProcessGroup and Backend methods (dist.group.WORLD.allreduce,
pg._get_backend(dev).allreduce: the latter never reaches the dispatcher); (3) the c10d,
functional-collective and symm_mem operator packets under torch.ops are wrapped as well, so
`torch.ops._c10d_functional.all_reduce(...)` counts however it is spelled in Python;
(4) below them all, the process groups' own sequence numbers (seqaudit.py): an operation that
reached a backend from C++ (dist._broadcast_coalesced, DDP's Reducer, torch._C._jit_get_operation)
moves them further than the calls the wrappers saw explain.
The first call of each size is setup (rendezvous) and is not counted.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

from .seqaudit import COALESCE_METHODS, SequenceAudit

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

def family_of_op(namespace: str, name: str) -> str | None:
    if namespace in ("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd"):
        if name in IGNORED_OPS:
            return None
        return "p2p" if name.startswith(("send", "recv")) else "collectives"
    if namespace == "symm_mem":
        return None if name in SYMM_MEM_ALLOWED else "symm_mem_ops"
    return None


class ForbidGuard:
    """Counts forbidden calls made while `active` (the candidate process's calls; the reference
    process installs none)."""

    def __init__(self, families: Iterable[str]) -> None:
        self.families = set(families)
        self.active = False
        self.calls: dict[str, int] = {}
        self.originals: dict[str, object] = {}
        self.audit: SequenceAudit | None = None
        self._p2p_explained = False

    def record(self, what: str):
        self.calls[what] = self.calls.get(what, 0) + 1

    def collect(self, counted: bool) -> dict[str, int]:
        """A batch's forbidden calls (none for a setup batch, whose count starts the next batch's
        sequence-number audit afresh), then cleared."""
        found = dict(self.calls) if counted else {}
        self.calls.clear()
        if self.audit is not None:
            if counted:
                found.update(self.audit.findings())
            else:
                self.audit.rebase()
        return found

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
        # below the wrappers, only where collectives are forbidden: where they are allowed, a step
        # no wrapper explains may be an allowed collective from C++ (DDP's), not a forbidden call
        if "collectives" in self.families:
            self.audit = SequenceAudit.start()
            if self.audit is not None:
                self._watch_constructors()
        self._wrap_process_groups(self._counted_methods())
        self._wrap_op_namespaces(ledger=False)
        if self.audit is not None and self.audit.counts_p2p():
            self.explain_p2p()

    def explain_p2p(self) -> None:
        """Allowed point-to-point calls explain their steps to the audit, wrapped once a backend
        that counts them (gloo) exists: on NCCL they move no step, and then an allowed call pays
        no wrapper (a timed call beside the reference's, which has none)."""
        if self._p2p_explained:
            return
        self._p2p_explained = True
        self._wrap_process_groups({m: ("p2p", None) for m in PG_P2P})
        self._wrap_op_namespaces(ledger=True)

    def _wrap(self, label: str, original: Callable[..., Any]) -> Callable[..., Any]:
        guard = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if guard.active:
                guard.record(label)
            return original(*args, **kwargs)

        wrapper.__name__ = getattr(original, "__name__", "wrapper")
        wrapper.__doc__ = getattr(original, "__doc__", None)
        return wrapper

    def _counted_methods(self) -> dict[str, tuple[str, str | None]]:
        """name -> (seqaudit kind, forbidden family or None): the forbidden methods, and with the
        audit on the allowed one that moves NCCL's number (a coalesced block's start)."""
        methods: dict[str, tuple[str, str | None]] = {}
        if self.audit is not None:
            methods.update({m: ("coalesce", None) for m in COALESCE_METHODS})
        if "collectives" in self.families:
            methods.update({m: ("collective", "collectives") for m in PG_COLLECTIVES})
        if "p2p" in self.families:
            methods.update({m: ("p2p", "p2p") for m in PG_P2P})
        return methods

    def _wrap_process_groups(self, methods: dict[str, tuple[str, str | None]]) -> None:
        """ProcessGroup and Backend methods, on the classes (pybind types accept new attributes);
        each tells the audit, if on, the steps it explains."""
        try:
            from torch._C._distributed_c10d import Backend, ProcessGroup
        except ImportError:
            return
        guard = self
        for cls in group_classes(ProcessGroup, Backend):
            for name, (kind, family) in methods.items():
                raw = cls.__dict__.get(name)
                if raw is None or getattr(raw, "_kb_wrapped", False):
                    continue
                label = f"{cls.__name__}.{name} ({family})" if family else None

                def method(self_: Any, *args: Any, _kb_raw: Any = raw, _kb_label: str | None = label,
                           _kb_kind: str = kind, **kwargs: Any) -> Any:
                    if _kb_label is not None and guard.active:
                        guard.record(_kb_label)
                    out = _kb_raw.__get__(self_, type(self_))(*args, **kwargs)
                    if guard.audit is not None:
                        guard.audit.saw(self_, _kb_kind)
                    return out

                method.__name__ = name
                method._kb_wrapped = True  # type: ignore[attr-defined]
                try:
                    setattr(cls, name, method)
                except (TypeError, AttributeError):
                    pass

    def _watch_constructors(self) -> None:
        """Groups and backends built later (new_group, or a ProcessGroupGloo made by hand outside
        the registry) are watched by the audit from their construction."""
        from torch._C._distributed_c10d import Backend, ProcessGroup
        audit, guard = self.audit, self
        assert audit is not None
        for cls in group_classes(ProcessGroup, Backend):
            raw = cls.__dict__.get("__init__")
            if raw is None or getattr(raw, "_kb_wrapped", False):
                continue

            def init(self_: Any, *args: Any, _kb_raw: Any = raw, **kwargs: Any) -> None:
                _kb_raw(self_, *args, **kwargs)
                audit.constructed(self_)
                if audit.counts_p2p([self_]):
                    guard.explain_p2p()

            init._kb_wrapped = True  # type: ignore[attr-defined]
            try:
                setattr(cls, "__init__", init)  # noqa: B010 - mypy refuses assigning __init__ on a class
            except (TypeError, AttributeError):
                pass

    def _wrap_op_namespaces(self, ledger: bool) -> None:
        """torch.ops.<ns>.<op> for the forbidden families: each operator packet is replaced by a
        counting proxy (its overloads too), so a direct dispatcher call counts like the function.
        ledger: the allowed point-to-point operators instead, which only explain steps to the audit."""
        for ns_name in OP_NAMESPACES:
            ns = getattr(torch.ops, ns_name, None)
            if ns is None:
                continue
            for op_name in _op_names(ns_name):
                family = family_of_op(ns_name, op_name)
                forbidden = family is not None and family in self.families
                if (ledger and (forbidden or family != "p2p")) or (not ledger and not forbidden):
                    continue
                try:
                    packet = getattr(ns, op_name)
                except (AttributeError, RuntimeError):
                    continue
                label = f"torch.ops.{ns_name}.{op_name} ({family})" if forbidden else None
                kind = "p2p" if family == "p2p" else "collective"
                setattr(ns, op_name, _CountingPacket(packet, label, self, kind))


def group_classes(*roots: type) -> list[type]:
    """The classes and every subclass below them (the backends: ProcessGroupGloo, ProcessGroupNCCL, ...)."""
    classes, todo = [], list(roots)
    while todo:
        cls = todo.pop()
        if cls not in classes:
            classes.append(cls)
            todo.extend(cls.__subclasses__())
    return classes


OP_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "symm_mem")


def _op_names(namespace: str) -> list[str]:
    """Every operator the dispatcher has registered in a namespace."""
    prefix = namespace + "::"
    names = {n[len(prefix):].split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith(prefix)}
    return sorted(names)


class _CountingPacket:
    """An operator packet that counts its calls (and its overloads' calls) while the guard is active
    (label None: an allowed operator), and tells the sequence audit the steps they explain (kind)."""

    def __init__(self, packet: Any, label: str | None, guard: ForbidGuard, kind: str | None = None) -> None:
        self._packet, self._label, self._guard, self._kind = packet, label, guard, kind

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._label is not None and self._guard.active:
            self._guard.record(self._label)
        out = self._packet(*args, **kwargs)
        if self._kind is not None and self._guard.audit is not None:
            self._guard.audit.saw(None, self._kind)
        return out

    def __getattr__(self, name: str) -> Any:
        inner = getattr(self._packet, name)
        if name.startswith("_") or not callable(inner):
            return inner
        return _CountingPacket(inner, self._label, self._guard, self._kind)
