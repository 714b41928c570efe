"""Every rank's small Python object, in rank order, through the job's key-value store.

torch's all_gather_object pickles into a tensor and unpacks it with numpy, which torch does not
require (a fresh `pip install torch` has none: every item then failed "Numpy is not available");
on NCCL it also puts the bytes through a CUDA collective. The store needs neither: each rank
sets its key, waits for every rank's key of the same call and reads them. All ranks must call
it in the same order (each call has its own sequence number), which the protocol guarantees.
"""
from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import pickle
from typing import Any

_calls: dict[str, int] = {}


def _store() -> Any:
    import torch.distributed as dist
    return dist.distributed_c10d._get_default_store()


def all_gather(obj: object, tag: str = "x", codec: str = "json", timeout_s: float | None = None,
               store: Any = None, key: str = "") -> list:
    """[rank 0's obj, rank 1's obj, ...] of the default process group. `codec`: json (plain data;
    never unpickles what another process wrote) or pickle (the native glue's bytes handles). With
    `key` (the checkers: their store is reachable by any local process), each entry carries an
    HMAC under it, and an entry without the right one is refused."""
    import torch.distributed as dist
    store = store if store is not None else _store()
    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:       # no one to hear from: three store round trips saved (a timed window agrees twice)
        return [json.loads(json.dumps(obj)) if codec == "json" else pickle.loads(pickle.dumps(obj))]
    n = _calls[tag] = _calls.get(tag, 0) + 1
    keys = [f"kb/{tag}/{n}/{r}" for r in range(world)]
    data = json.dumps(obj).encode() if codec == "json" else pickle.dumps(obj)
    if key:
        data = _mac(key, keys[rank], data).encode() + b"|" + data
    store.set(keys[rank], data)
    if timeout_s is None:
        store.wait(keys)
    else:
        store.wait(keys, datetime.timedelta(seconds=timeout_s))
    raw = [store.get(k) for k in keys]
    if key:
        raw = [_verified(key, k, v) for k, v in zip(keys, raw)]
    return [json.loads(v) for v in raw] if codec == "json" else [pickle.loads(v) for v in raw]


def _mac(key: str, name: str, data: bytes) -> str:
    return hmac.new(key.encode(), name.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def _verified(key: str, name: str, value: bytes) -> bytes:
    mac, sep, data = value.partition(b"|")
    if not sep or not hmac.compare_digest(mac.decode(errors="replace"), _mac(key, name, data)):
        raise ForgedEntry(f"an unsigned or forged entry {name!r} in the checkers' store")
    return data


class ForgedEntry(RuntimeError):
    """Something other than a checker wrote into the checkers' store."""
