"""CPU cores for a rank's processes on GPU machines: the candidate process and the reference process
share one physical core, their checker has another. The two never run a window at the same time
(the other is stopped), so sharing costs neither anything, and both windows run on the same core:
on a VM, two cores can differ by tens of percent in what a launch-bound call costs (measured on an
H100 VM: the same reference read 0.7 and 1.2 against itself on two cores). A checker that waits
for "done" by spinning must not take CPU from the calls (measured on an H100: a spinning neighbour
made a 27 us call take 44 us); pinned apart it can spin, where a sleeping one pays a scheduler
wake-up. Pinned only once the candidate is imported: a build (ninja, nvcc) gets every core.
Where the machine has too few cores for every rank, nothing is pinned and the checker sleeps."""
from __future__ import annotations

import os


def physical_cores() -> list[list[int]]:
    """The CPUs this process may use, grouped by physical core (hyperthread siblings together)."""
    allowed = sorted(os.sched_getaffinity(0))
    groups: dict[str, list[int]] = {}
    for cpu in allowed:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                key = f.read().strip()
        except OSError:
            key = str(cpu)
        groups.setdefault(key, []).append(cpu)
    return [g for g in groups.values() if g]


def plan(local_rank: int, local_world: int) -> tuple[set[int], set[int]] | None:
    """(the checker's CPUs, the CPUs of its candidate and reference processes) for this rank, or
    None when the machine has fewer than two physical cores per rank plus one for everything else."""
    cores = physical_cores()
    if len(cores) < 2 * local_world + 1:
        return None
    # from the top, leaving the first cores to the pytest process, the zygote and the system
    checker = cores[len(cores) - 1 - 2 * local_rank]
    solvers = cores[len(cores) - 2 - 2 * local_rank]
    return set(checker), set(solvers)
