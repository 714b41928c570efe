"""The checkers' TCPStore, opened before their process group so that the solver processes can
meet through it while the group forms: a Slurm step's (rank 0's, its address relayed by the
launcher: steps.py), the rank server's (rank 0's, its port published in the job folder), or
torchrun's (env://). Any local process that finds its port can connect, so the checkers see it
only through `private`: every key under a prefix derived from the job's key (which no candidate
process ever holds), and what they publish there for each other sealed with that key.

Torch >= 2.6's TCPStore answers list_keys() to any client: a prefix read that way is known, and a
client who reads it may write under it; what the checkers read from there is then trusted only
where it is sealed (`seal`, exchange.all_gather) or refused by a later check (a forged group
address fails the group's connection). Best effort, said so in the README's threat model.
"""
from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import time
from typing import Any


def open_store(rank: int, world: int, timeout: datetime.timedelta, step_io: Any = None,
               step_timeout_s: float = 0.0) -> Any:
    if step_io is not None:
        from .steps import store as step_store
        return step_store(step_io, rank, world, timeout, step_timeout_s)
    if os.environ.get("KB_RENDEZVOUS"):    # forked by the rank server: no torchrun store to join
        return rendezvous_store(os.environ["KB_RENDEZVOUS"], rank, world, timeout)
    from torch.distributed import rendezvous
    env_store, _, _ = next(rendezvous("env://", rank=rank, world_size=world, timeout=timeout))
    env_store.set_timeout(timeout)
    return env_store


def rendezvous_store(path: str, rank: int, world: int, timeout: datetime.timedelta) -> Any:
    """Rank 0 serves a TCPStore on a port the OS picks (no race for a free port) and publishes it
    in `path`; the other ranks wait for the file and join."""
    from torch.distributed import TCPStore
    if rank == 0:
        store = TCPStore("127.0.0.1", 0, world, True, timeout=timeout, wait_for_workers=False)
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            f.write(str(store.port))
        os.replace(tmp, path)
        return store
    end = time.monotonic() + timeout.total_seconds()
    while True:
        try:
            with open(path) as f:
                port = int(f.read())
            break
        except (OSError, ValueError):
            if time.monotonic() > end:
                raise TimeoutError(f"rank 0 did not publish its store within {timeout.total_seconds():.0f} s") from None
            time.sleep(0.005)
    return TCPStore("127.0.0.1", port, world, False, timeout=timeout)


def private(store: Any, key: str) -> Any:
    """The checkers' view of their store: every key under "kb-<hmac of the job's key>/"."""
    from torch.distributed import PrefixStore
    tag = hmac.new(key.encode(), b"kb checkers store", hashlib.sha256).hexdigest()[:32]
    return PrefixStore(f"kb-{tag}", store)


def seal(key: str, name: str, value: str) -> str:
    return f"{value} {hmac.new(key.encode(), f'{name}|{value}'.encode(), hashlib.sha256).hexdigest()}"


def unseal(key: str, name: str, text: str) -> str | None:
    """The value a checker sealed under `name`, or None when someone without the key wrote it."""
    value, _, mac = text.rpartition(" ")
    return value if value and hmac.compare_digest(seal(key, name, value), text) else None
