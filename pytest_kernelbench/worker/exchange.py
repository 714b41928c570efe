"""Every rank's small Python object, in rank order, through the job's key-value store.

torch's all_gather_object pickles into a tensor and unpacks it with numpy, which torch does not
require (a fresh `pip install torch` has none: every item then failed "Numpy is not available");
on NCCL it also puts the bytes through a CUDA collective. The store needs neither: each rank
sets its key, waits for every rank's key of the same call and reads them. All ranks must call
it in the same order (each call has its own sequence number), which the protocol guarantees.
"""
from __future__ import annotations

import datetime
import json
import pickle
from typing import Any

_calls: dict[str, int] = {}


def _store() -> Any:
    import torch.distributed as dist
    return dist.distributed_c10d._get_default_store()


def all_gather(obj: object, tag: str = "x", codec: str = "json", timeout_s: float | None = None,
               store: Any = None) -> list:
    """[rank 0's obj, rank 1's obj, ...] of the default process group. `codec`: json (plain data;
    never unpickles what another process wrote) or pickle (the native glue's bytes handles)."""
    import torch.distributed as dist
    store = store if store is not None else _store()
    rank, world = dist.get_rank(), dist.get_world_size()
    n = _calls[tag] = _calls.get(tag, 0) + 1
    keys = [f"kb/{tag}/{n}/{r}" for r in range(world)]
    data = json.dumps(obj).encode() if codec == "json" else pickle.dumps(obj)
    store.set(keys[rank], data)
    if timeout_s is None:
        store.wait(keys)
    else:
        store.wait(keys, datetime.timedelta(seconds=timeout_s))
    raw = [store.get(k) for k in keys]
    return [json.loads(v) for v in raw] if codec == "json" else [pickle.loads(v) for v in raw]
