"""A first call that hangs, told from one that compiles, from outside the ranks.

The first call of each size runs on the compile budget (launch._wait), so a deadlock there (a recv
nobody sends: the commonest bug of a new kernel) used to wait out the whole deadline, and the
process-group timeout that makes later hangs surface fast was the compile budget's. The budget is
for compiling: while every rank is in its first call (or waits for its peers to end theirs), no
process of the job doing anything (no compile activity, procs.Activity, and no candidate process
using CPU, its children included) for the job's process-group timeout is a hang. A rank that
spins burns CPU and is left to the deadline, as are ranks this host cannot see (a Slurm step on
other nodes): there nothing can be told.
"""
from __future__ import annotations

from ..procs import ACTIVE_CPU_S, cpu_times
from ..protocol import SETUP_MARK


def first_call(phases: dict[int, str], nproc: int) -> bool:
    """Every rank is in the first call of a size, or waits for its peers to finish theirs: no
    checker is doing work of its own then (a rank still making its inputs is not waited on)."""
    return len(phases) == nproc and all(SETUP_MARK in p for p in phases.values())


class Stall:
    def __init__(self, hang_s: float, nproc: int):
        self.hang_s, self.nproc = hang_s, nproc
        self.cpu: dict[int, float] = {}
        self.busy_at: float | None = None

    def sample(self, now: float, phases: dict[int, str], candidates: dict[int, int], job_pids: set[int],
               active: bool) -> None:
        """One look (launch._wait's activity sample): `candidates` rank -> candidate pid as the
        checkers wrote them, `job_pids` the job's processes found on this host, `active` whether
        procs.Activity saw compile work since the last look."""
        pids = set(candidates.values())
        seen = {pid: cpu_times(pid) for pid in pids}
        cpu = {pid: t[0] + t[1] for pid, t in seen.items() if t is not None}
        visible = len(candidates) == self.nproc and pids <= job_pids and len(cpu) == len(pids)
        used = any(cpu[p] - self.cpu.get(p, cpu[p]) >= ACTIVE_CPU_S for p in cpu)
        fresh = any(p not in self.cpu for p in cpu)
        self.cpu = cpu
        if active or used or fresh or not visible or not first_call(phases, self.nproc) or self.busy_at is None:
            self.busy_at = now

    def reset(self, now: float) -> None:
        """Not in a first call now (or not started yet): nothing to tell."""
        self.busy_at = now

    def stalled(self, now: float) -> bool:
        return self.busy_at is not None and now - self.busy_at > self.hang_s

    def reason(self) -> str:
        return (f"a hang in the first call: no rank compiled or used CPU for {self.hang_s:.0f} s (the process-group "
                "timeout; the compile budget is only for compiling)")
