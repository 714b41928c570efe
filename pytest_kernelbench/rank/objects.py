"""Inputs that are not plain data, lent across the process boundary as they were passed when the
candidate ran beside the harness (ParallelKernelBench passes all of these): a process group, as
its ranks (the receiving process uses its own group of the same ranks), and any other object (a
torch.nn.Module), pickled with its tensors lent as leaves of the tree (rank/memory.py), so they
live in the arenas like every other input. Pickle goes from the checker to its solver processes
only, never back: what a candidate process sends is JSON (protocol.decode)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class LendError(RuntimeError):
    """What cannot cross between the checker and its solver processes (memory.MemoryError_ is one)."""


def group_leaf(o: Any) -> dict | None:
    """A process group input (PKB passes some) as its ranks: the receiving process uses its own
    group of the same ranks (group())."""
    import torch.distributed as dist
    if not isinstance(o, dist.ProcessGroup):
        return None
    return {"t": "G", "ranks": [int(r) for r in dist.get_process_group_ranks(o)]}


_GROUPS: dict[tuple[int, ...], Any] = {}


def group(ranks: list[int]) -> Any:
    """This process's group of these ranks: the default group, or one made once by its members
    alone (use_local_synchronization: the ranks outside it never call; its name is hashed from
    the ranks, so every member's is the same)."""
    import torch.distributed as dist
    key = tuple(ranks)
    if key == tuple(range(dist.get_world_size())):
        return dist.group.WORLD
    if key not in _GROUPS:
        _GROUPS[key] = dist.new_group(list(key), use_local_synchronization=True)
    return _GROUPS[key]


def pickled(o: Any, walk: Callable[[Any], dict]) -> dict:
    """Any other input (a torch.nn.Module: PKB passes some), pickled with its tensors lent as
    leaves (so its parameters live in the arenas, like every other input tensor) and its process
    groups named. Pickle goes from the checker to the candidate only, never back."""
    import base64
    import io
    import pickle
    refs: list[dict] = []

    class Lender(pickle.Pickler):
        def persistent_id(self, obj: Any) -> int | None:
            if isinstance(obj, torch.Tensor) or group_leaf(obj) is not None:
                leaf = walk(obj.detach() if isinstance(obj, torch.Tensor) else obj)
                if isinstance(obj, torch.nn.Parameter):
                    leaf = {"t": "Q", "x": leaf, "grad": bool(obj.requires_grad)}
                refs.append(leaf)
                return len(refs) - 1
            return None

    buf = io.BytesIO()
    try:
        Lender(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(o)
    except Exception as e:  # noqa: BLE001 - what pickle says is the reason
        raise LendError(f"an input of type {type(o).__name__} cannot be lent to the candidate: {e}") from None
    return {"t": "P", "b": base64.b64encode(buf.getvalue()).decode(), "x": refs}


def unpickled(tree: dict, build: Callable[[dict], Any]) -> Any:
    """The object a "P" node describes, each lent leaf built by `build` (views of the arenas)."""
    import base64
    import io
    import pickle
    refs = [build(r) for r in tree["x"]]

    class Borrower(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            return refs[int(pid)]

    return Borrower(io.BytesIO(base64.b64decode(tree["b"]))).load()
