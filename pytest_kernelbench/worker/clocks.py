"""The harness's own handles on clocks and synchronization, captured before any candidate runs."""
from __future__ import annotations

import threading
import time
from typing import Any

import torch
import torch.distributed as dist

from .exchange import all_gather as _all_gather
from .guards import harness_call


class ClockSet:
    """The harness's own handles on clocks and synchronization, captured before any candidate runs."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"
        self.perf_counter = time.perf_counter
        self._barrier = dist.barrier
        self.enumerate_threads = threading.enumerate
        if self.cuda:
            self._c_sync = torch._C._cuda_synchronize
            self.Event = torch.cuda.Event
            self._record = torch.cuda.Event.record
            self._elapsed = torch.cuda.Event.elapsed_time
            self._ev_sync = torch.cuda.Event.synchronize
        self.baseline_threads = set(threading.enumerate())

    def barrier(self):
        with harness_call():
            self._barrier()

    def all_gather(self, obj: object) -> list:
        """Every rank's `obj` (plain data), through the store: no numpy, no collective."""
        return _all_gather(obj, "agree")

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

    def record(self, ev: Any) -> Any:
        self._record(ev)

    def elapsed_s(self, start: Any, end: Any) -> float:
        self._ev_sync(end)
        return self._elapsed(start, end) / 1000.0
