"""CPU cores for a rank's processes on GPU machines: the candidate process and the reference process
share one physical core, their checker has another. The two never run a window at the same time
(the other is stopped), so sharing costs neither anything, and both windows run on the same core:
on a VM, two cores can differ by tens of percent in what a launch-bound call costs (measured on an
H100 VM: the same reference read 0.7 and 1.2 against itself on two cores). A checker that waits
for "done" by spinning must not take CPU from the calls (measured on an H100: a spinning neighbour
made a 27 us call take 44 us); pinned apart it can spin, where a sleeping one pays a scheduler
wake-up. Pinned only once the candidate is imported: a build (ninja, nvcc) gets every core.

The cores follow the GPU, not the rank: xdist workers run jobs side by side on one host, each on
the GPUs it leased, and every job's rank 0 pinned by its local rank would share one pair of cores
(two spinning checkers and every job's calls on two cores). Each GPU of the host owns a pair:
from the top of the cores near it (its NUMA node, sysfs `local_cpulist`), in PCI order among the
GPUs near the same cores, so whichever job leases a GPU gets the same pair and no other job does.
Where a node has too few cores for its GPUs the pairs come from the top of all cores, by the GPU's
place on the host; where the GPU is unknown (no PCI address, no sysfs), by the local rank as
before. Where the machine has too few cores for that, nothing is pinned and the checker sleeps."""
from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from ..protocol import range_list

SYSFS = Path("/sys")
NVIDIA = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")     # VGA and 3D controllers (an H100/H200 is 0x0302)


class Pinning(NamedTuple):
    checker: set[int]
    solvers: set[int]
    basis: str                      # how the pair was chosen, for the report

    def record(self) -> dict:
        return {"checker": sorted(self.checker), "solvers": sorted(self.solvers), "basis": self.basis}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def physical_cores(sysfs: Path = SYSFS, allowed: set[int] | None = None) -> list[list[int]]:
    """The CPUs this process may use, grouped by physical core (hyperthread siblings together)."""
    groups: dict[str, list[int]] = {}
    for cpu in sorted(os.sched_getaffinity(0) if allowed is None else allowed):
        key = _read(sysfs / f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") or str(cpu)
        groups.setdefault(key, []).append(cpu)
    return [g for g in groups.values() if g]


def host_gpus(sysfs: Path = SYSFS) -> list[str]:
    """The PCI addresses of the host's NVIDIA GPUs, in PCI order."""
    try:
        devices = sorted(p for p in (sysfs / "bus/pci/devices").iterdir())
    except OSError:
        return []
    return [d.name for d in devices
            if _read(d / "vendor") == NVIDIA and (_read(d / "class") or "").startswith(GPU_CLASSES)]


def near_cpus(gpu: str, sysfs: Path = SYSFS) -> frozenset[int]:
    """The CPUs near a GPU (its NUMA node's); empty where sysfs does not say."""
    text = _read(sysfs / "bus/pci/devices" / gpu / "local_cpulist")
    try:
        return frozenset(range_list(text)) if text else frozenset()
    except ValueError:
        return frozenset()


def _pair(cores: list[list[int]], slot: int, basis: str) -> Pinning:
    """Slot k's pair, from the top (the first cores stay with pytest, the zygote and the system)."""
    return Pinning(set(cores[len(cores) - 1 - 2 * slot]), set(cores[len(cores) - 2 - 2 * slot]), basis)


def plan(local_rank: int, local_world: int, gpu: str | None = None, sysfs: Path = SYSFS,
         allowed: set[int] | None = None) -> Pinning | None:
    """The checker's CPUs and its two solver processes' CPUs for the rank on GPU `gpu` (its PCI
    address), or None when the machine has too few cores (two per GPU, or per rank, and one more)."""
    cores = physical_cores(sysfs, allowed)
    gpus = host_gpus(sysfs) if gpu else []
    if gpu in gpus:
        near = {g: near_cpus(g, sysfs) for g in gpus}
        nodes = {cpus: [g for g in gpus if near[g] == cpus] for cpus in set(near.values())}
        local = {cpus: [c for c in cores if set(c) <= cpus] for cpus in nodes}
        # every node's GPUs get their pairs near them, or no GPU does (a GPU on a node with room
        # choosing by node and one beside it choosing by host could meet on a core)
        if all(cpus and len(local[cpus]) >= 2 * len(peers) + 1 for cpus, peers in nodes.items()):
            peers = nodes[near[gpu]]
            return _pair(local[near[gpu]], peers.index(gpu),
                         f"GPU {gpu}: pair {peers.index(gpu) + 1} of {len(peers)} near it")
        if len(cores) >= 2 * len(gpus) + 1:
            return _pair(cores, gpus.index(gpu), f"GPU {gpu}: pair {gpus.index(gpu) + 1} of {len(gpus)} on the host")
    if len(cores) >= 2 * local_world + 1:
        return _pair(cores, local_rank, f"local rank {local_rank} of {local_world} (the GPU's place not known)")
    return None
