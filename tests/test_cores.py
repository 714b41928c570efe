"""Which CPU cores a rank's processes are pinned to (rank/cores.py), on made-up hosts: jobs side by
side on one host must never share a core, whichever GPUs they leased."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pytest_kernelbench.protocol import range_list
from pytest_kernelbench.rank.cores import host_gpus, physical_cores, plan


def host(root: Path, nodes: list[tuple[int, int]], smt: bool = False, numa: bool = True) -> tuple[Path, set[int]]:
    """A sysfs with NUMA nodes of (physical cores, GPUs); with `smt`, each core has a sibling CPU
    numbered after all the first ones (as Linux numbers them). Returns (sysfs, every CPU)."""
    total = sum(n for n, _ in nodes)
    first, bus = 0, 0x10
    for cores, gpus in nodes:
        cpus = set(range(first, first + cores)) | (set(range(total + first, total + first + cores)) if smt else set())
        for c in range(first, first + cores):
            for cpu in (c, total + c) if smt else (c,):
                d = root / f"devices/system/cpu/cpu{cpu}/topology"
                d.mkdir(parents=True)
                d.joinpath("thread_siblings_list").write_text(f"{c},{total + c}\n" if smt else f"{c}\n")
        for _ in range(gpus):
            dev = root / f"bus/pci/devices/0000:{bus:02x}:00.0"
            dev.mkdir(parents=True)
            dev.joinpath("vendor").write_text("0x10de\n")
            dev.joinpath("class").write_text("0x030200\n")
            all_cpus = f"0-{total * (2 if smt else 1) - 1}"
            dev.joinpath("local_cpulist").write_text(_list(cpus) + "\n" if numa else all_cpus + "\n")
            bus += 0x10
        first += cores
    other = root / "bus/pci/devices/0000:00:01.0"          # not a GPU: a bridge
    other.mkdir(parents=True)
    other.joinpath("vendor").write_text("0x8086\n")
    other.joinpath("class").write_text("0x060400\n")
    every = set(range(total * (2 if smt else 1)))
    return root, every


def _list(cpus: set[int]) -> str:
    runs, out = [], []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    for lo, hi in runs:
        out.append(f"{lo}-{hi}" if hi > lo else str(lo))
    return ",".join(out)


def pinnings(sysfs: Path, every: set[int], local_rank: int = 0, world: int = 1) -> dict[str, object]:
    """Each GPU's plan as a job of one rank (local rank 0) on that GPU would make it."""
    return {g: plan(local_rank, world, g, sysfs=sysfs, allowed=every) for g in host_gpus(sysfs)}


def test_a_sysfs_cpu_list_reads_runs_and_single_cpus():
    assert set(range_list("0-3,8,10-11\n")) == {0, 1, 2, 3, 8, 10, 11}
    assert set(range_list("5")) == {5}
    assert set(range_list("")) == set()


def test_only_nvidia_gpus_count_in_pci_order(tmp_path):
    sysfs, _ = host(tmp_path, [(8, 2)])
    assert host_gpus(sysfs) == ["0000:10:00.0", "0000:20:00.0"]


def test_jobs_on_different_gpus_never_share_a_core_where_each_is_its_own_rank_0(tmp_path):
    """The bug this replaced: every job's rank 0 took the top two cores, whatever GPU it had."""
    sysfs, every = host(tmp_path, [(16, 4), (16, 4)])
    plans = pinnings(sysfs, every)
    assert len(plans) == 8 and all(p is not None for p in plans.values())
    taken = [p.checker | p.solvers for p in plans.values()]
    for a, b in itertools.combinations(taken, 2):
        assert not a & b
    for p in plans.values():
        assert not p.checker & p.solvers


def test_a_gpus_pair_is_near_it_and_the_first_cores_stay_free(tmp_path):
    sysfs, every = host(tmp_path, [(16, 4), (16, 4)])
    plans = pinnings(sysfs, every)
    gpus = list(plans)
    for g in gpus[:4]:
        assert plans[g].checker | plans[g].solvers <= set(range(0, 16)), g
        assert "near it" in plans[g].basis
    for g in gpus[4:]:
        assert plans[g].checker | plans[g].solvers <= set(range(16, 32)), g
    used = set().union(*(p.checker | p.solvers for p in plans.values()))
    assert {0, 16} & used == set()


def test_hyperthread_siblings_go_together(tmp_path):
    sysfs, every = host(tmp_path, [(8, 2), (8, 2)], smt=True)
    plans = pinnings(sysfs, every)
    for p in plans.values():
        for cpus in (p.checker, p.solvers):
            assert len(cpus) == 2 and max(cpus) - min(cpus) == 16       # cpu c and its sibling 16 + c
    taken = [p.checker | p.solvers for p in plans.values()]
    assert all(not a & b for a, b in itertools.combinations(taken, 2))


def test_a_node_short_of_cores_makes_every_gpu_choose_by_its_place_on_the_host(tmp_path):
    """Node 0 has 8 cores for 4 GPUs (needs 9): no GPU chooses near it, or one choosing by node
    and one by host could meet on a core."""
    sysfs, every = host(tmp_path, [(8, 4), (24, 2)])
    plans = pinnings(sysfs, every)
    assert all("on the host" in p.basis for p in plans.values())
    taken = [p.checker | p.solvers for p in plans.values()]
    assert all(not a & b for a, b in itertools.combinations(taken, 2))
    assert 0 not in set().union(*taken)


def test_without_numa_facts_the_gpus_share_the_cores_of_the_host_and_still_do_not_meet(tmp_path):
    sysfs, every = host(tmp_path, [(10, 2), (10, 2)], numa=False)
    plans = pinnings(sysfs, every)
    taken = [p.checker | p.solvers for p in plans.values()]
    assert all(not a & b for a, b in itertools.combinations(taken, 2))


def test_one_gpu_vm_keeps_the_top_two_cores(tmp_path):
    """The lent one-GPU machines: the pair the evidence was measured on."""
    sysfs, every = host(tmp_path, [(16, 1)])
    (p,) = pinnings(sysfs, every).values()
    assert (p.checker, p.solvers) == ({15}, {14})


def test_a_rank_of_a_two_gpu_job_takes_its_gpus_pair_not_its_local_ranks(tmp_path):
    sysfs, every = host(tmp_path, [(16, 4)])
    gpus = host_gpus(sysfs)
    job_a = [plan(r, 2, g, sysfs=sysfs, allowed=every) for r, g in enumerate(gpus[:2])]
    job_b = [plan(r, 2, g, sysfs=sysfs, allowed=every) for r, g in enumerate(gpus[2:])]
    taken = [p.checker | p.solvers for p in job_a + job_b]
    assert all(not a & b for a, b in itertools.combinations(taken, 2))


def test_an_unknown_gpu_falls_back_to_the_local_rank(tmp_path):
    sysfs, every = host(tmp_path, [(16, 2)])
    for gpu in (None, "0000:99:00.0"):
        p = plan(1, 2, gpu, sysfs=sysfs, allowed=every)
        assert (p.checker, p.solvers) == ({13}, {12}) and "local rank 1 of 2" in p.basis


@pytest.mark.parametrize("cores, gpus, pinned", [(4, 2, False), (5, 2, True), (2, 1, False), (3, 1, True)])
def test_too_few_cores_pin_nothing(tmp_path, cores, gpus, pinned):
    sysfs, every = host(tmp_path, [(cores, gpus)])
    plans = pinnings(sysfs, every, world=gpus)
    assert all((p is not None) == pinned for p in plans.values())


def test_only_allowed_cpus_are_used(tmp_path):
    """A Slurm step or a cgroup may allow part of the host: pairs come from what is allowed."""
    sysfs, _ = host(tmp_path, [(16, 2)])
    allowed = set(range(0, 6))
    assert [c[0] for c in physical_cores(sysfs, allowed)] == list(range(6))
    for g in host_gpus(sysfs):
        p = plan(0, 1, g, sysfs=sysfs, allowed=allowed)
        assert p.checker | p.solvers <= allowed
