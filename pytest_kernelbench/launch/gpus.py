"""Leasing GPUs to items across xdist workers: a JSON pool guarded by a file lock.

Each item leases the W GPUs it runs on; two items never hold the same GPU. A lease held by a
process that died is reclaimed. The pool keeps a history of leases so each item can report
what ran at the same time (timings of concurrent items share host resources).

Keyed by host: on a cluster the cache folder may be a home shared by every node, where one pool
file would be read by pytest on two nodes, and a lease by pid P on node A looks dead on node B
(and was deleted: double-booking). Each host has its own file (`<name>@<host>.json`), each lease
names its host, and only leases of this host are ever judged dead. The host is the Slurm node's
name where there is one (SLURMD_NODENAME: several nodes may share a host name in a test cluster).
"""
from __future__ import annotations

import json
import os
import re
import socket
import time
from contextlib import contextmanager
from pathlib import Path


from ..protocol import atomic_write


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def this_host() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


class GpuPool:
    def __init__(self, state_path: Path, gpu_ids: list[int], host: str | None = None):
        self.host = host or this_host()
        base = Path(state_path)
        self.path = base.with_name(f"{base.stem}@{re.sub(r'[^A-Za-z0-9._-]', '_', self.host)}{base.suffix}")
        from filelock import FileLock  # here, not at import: the plugin loads without its runtime packages
        self.lock = FileLock(str(self.path) + ".lock")
        self.gpu_ids = list(gpu_ids)

    def _load(self) -> dict:
        try:
            state = json.loads(self.path.read_text())
        except (OSError, ValueError):
            state = {}
        state.setdefault("held", {})
        state.setdefault("history", [])
        for gpu, lease in list(state["held"].items()):
            if lease.get("host", self.host) == self.host and not _alive(lease["pid"]):
                del state["held"][gpu]
        return state

    def _save(self, state: dict):
        atomic_write(self.path, json.dumps(state))

    def try_acquire(self, n: int, item: str, exclusive: bool = False) -> list[int] | None:
        with self.lock:
            state = self._load()
            free = [g for g in self.gpu_ids if str(g) not in state["held"]]
            want = len(self.gpu_ids) if exclusive else n
            if len(free) < want or n > len(self.gpu_ids):
                return None
            taken = free[:want]
            now = time.time()
            for g in taken:
                state["held"][str(g)] = {"pid": os.getpid(), "host": self.host, "item": item, "since": now}
            self._save(state)
            return taken[:n]

    def release(self, gpus: list[int], item: str) -> list[str]:
        """Free the item's GPUs; return the other items whose leases overlapped this one in time."""
        with self.lock:
            state = self._load()
            start = min((state["held"][str(g)]["since"] for g in gpus if str(g) in state["held"]), default=time.time())
            for g in list(state["held"]):
                if state["held"][g]["item"] == item:
                    del state["held"][g]
            end = time.time()
            overlapping = {h["item"] for h in state["history"] if h["item"] != item and h["end"] > start}
            overlapping |= {lease["item"] for lease in state["held"].values() if lease["item"] != item}
            state["history"].append({"item": item, "gpus": gpus, "start": start, "end": end})
            state["history"] = state["history"][-1000:]
            self._save(state)
            return sorted(overlapping)

    @contextmanager
    def lease(self, n: int, item: str, exclusive: bool = False, timeout_s: float = 3600.0, poll_s: float = 0.2):
        if n > len(self.gpu_ids):
            raise RuntimeError(f"needs {n} GPUs, the pool has {len(self.gpu_ids)}")
        deadline = time.monotonic() + timeout_s
        while (gpus := self.try_acquire(n, item, exclusive)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {n} free GPUs within {timeout_s:.0f} s")
            time.sleep(poll_s)
        info: dict[str, list] = {"gpus": gpus, "concurrent_with": []}     # concurrent_with: other items' ids
        try:
            yield info
        finally:
            info["concurrent_with"] = self.release(gpus, item)
