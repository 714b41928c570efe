"""The forbid guard's count below every entry point (issue 44, class 6). Wrappers see only the calls
that pass through Python: dist._broadcast_coalesced, DDP's C++ Reducer and an operator looked up
with torch._C._jit_get_operation reach the backend from C++. Every backend operation moves its
process group's own sequence number, so the numbers of every group the candidate process can
reach, read after each batch, must have moved exactly as far as the calls the wrappers saw explain;
any step more is an operation no wrapper saw.

What each backend counts (read from its source and measured on gloo, torch 2.13): gloo one step for
every operation, collective or point-to-point; NCCL's number is its collectives' (point-to-point
calls move a counter of their own, not exposed) and a coalesced block takes one step when it
starts. A backend not in the table is allowed one step per call seen (an upper bound).

Best effort, like every guard in the candidate's own process: the numbers are read there, so a
candidate that finds this object can change what it reports.
"""
from __future__ import annotations

from typing import Any

# steps a successful call of each kind moves its group's number, by backend
STEPS = {
    "gloo": {"collective": 1, "p2p": 1, "coalesce": 0},
    "nccl": {"collective": 1, "p2p": 0, "coalesce": 1},
}
UNKNOWN_STEPS = {"collective": 1, "p2p": 1, "coalesce": 1}
BACKEND_NAMES = {"ProcessGroupGloo": "gloo", "ProcessGroupNCCL": "nccl"}
# ProcessGroup / Backend methods that move the number but no forbid family names
COALESCE_METHODS = ("_start_coalescing",)
LABEL = "operations that reached a process group below every wrapper (its own sequence number moved {} " \
        "step(s) more than the calls seen explain: a collective from C++, e.g. dist._broadcast_coalesced, DDP's " \
        "Reducer or torch._C._jit_get_operation)"
TAMPER_LABEL = "a process group's sequence number went backwards (the counter the forbid guard reads was reset)"


class SequenceAudit:
    """Steps explained by the calls seen since the last batch, against the steps the groups took."""

    @classmethod
    def start(cls) -> SequenceAudit | None:
        """The audit, or None where this torch keeps no readable number (the wrappers still count)."""
        try:
            return cls()
        except (ImportError, KeyError, AttributeError):
            return None

    def __init__(self) -> None:
        from torch._C._distributed_c10d import Backend, ProcessGroup
        self.ProcessGroup = ProcessGroup
        # the raw readers, taken before any candidate code runs (a patched class attribute changes nothing here)
        self.read_group = ProcessGroup.__dict__["_get_sequence_number_for_group"]
        self.read_backend = Backend.__dict__["_get_sequence_number_for_group"]
        self.group_backend = ProcessGroup.__dict__.get("_get_backend_name")
        self.made: list[Any] = []        # groups and backends built outside init/new_group (their constructors are watched)
        self.names: dict[int, tuple[Any, str]] = {}
        self.explained = 0
        self.base: dict[int, int] = {}
        self.held: list[Any] = []
        self.rebase()

    # ---- what the wrappers report -----------------------------------------------------------------
    def saw(self, obj: Any, kind: str) -> None:
        """A wrapped call returned: the steps it explains on obj's backend (None: the default group)."""
        self.explained += STEPS.get(self.backend_name(obj), UNKNOWN_STEPS)[kind]

    def backend_name(self, obj: Any) -> str:
        if obj is None:
            import torch.distributed as dist
            obj = dist.group.WORLD
        known = self.names.get(id(obj))
        if known is not None and known[0] is obj:
            return known[1]
        name = BACKEND_NAMES.get(type(obj).__name__, "")
        if not name and isinstance(obj, self.ProcessGroup) and self.group_backend is not None:
            try:
                name = str(self.group_backend(obj))
            except Exception:  # noqa: BLE001 - a group without a default backend: the upper bound
                name = ""
        self.names[id(obj)] = (obj, name)
        return name

    def constructed(self, obj: Any) -> None:
        self.made.append(obj)

    def counts_p2p(self, groups: list[Any] | None = None) -> bool:
        """Whether a backend among these (every group watched) moves its number on point-to-point
        calls. A ProcessGroup made by hand counts by its backends, constructed (and seen) apart."""
        if groups is None:
            groups = self.groups()
        elif all(isinstance(g, self.ProcessGroup) for g in groups):
            return False
        return any(STEPS.get(self.backend_name(g), UNKNOWN_STEPS)["p2p"] for g in groups)

    # ---- the numbers --------------------------------------------------------------------------------
    def groups(self) -> list[Any]:
        import torch
        import torch.distributed.distributed_c10d as c10d
        world = getattr(c10d, "_world", None)
        registered = list(getattr(world, "pg_map", {}) or {})
        if not self.made:
            return registered
        inside = {id(g) for g in registered}
        for g in registered:       # a registered group's backends read through the group: once
            for dev in getattr(g, "_device_types", ()) or ():
                try:
                    inside.add(id(g._get_backend(torch.device(dev))))
                except Exception:  # noqa: BLE001 - no backend for that device type
                    pass
        return registered + [m for m in self.made if id(m) not in inside]

    def read(self) -> dict[int, int]:
        out, held = {}, []
        for g in self.groups():
            try:
                seq = self.read_group(g) if isinstance(g, self.ProcessGroup) else self.read_backend(g)
            except Exception:  # noqa: BLE001 - a backend that keeps no number
                continue
            out[id(g)] = int(seq)
            held.append(g)         # ids stay theirs while held
        self.held = held
        return out

    def rebase(self) -> None:
        self.base = self.read()
        self.explained = 0

    def findings(self) -> dict[str, int]:
        """What moved unexplained since the last rebase (then rebased)."""
        now = self.read()
        moved = [seq - self.base.get(k, 0) for k, seq in now.items()]
        out = {}
        extra = sum(m for m in moved if m > 0) - self.explained
        if extra > 0:
            out[LABEL.format(extra)] = extra
        if any(m < 0 for m in moved):
            out[TAMPER_LABEL] = 1
        self.base, self.explained = now, 0
        return out
