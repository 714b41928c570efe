"""launch.gpus: the GPU lease pool never shares a GPU, exclusive leases, dead holders."""
from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import pytest

from pytest_kernelbench.launch.gpus import GpuPool


def _hold(path, n, out, key):
    pool = GpuPool(Path(path), [0, 1, 2, 3])
    with pool.lease(n, key) as lease:
        out[key] = (lease["gpus"], time.time())
        time.sleep(0.5)


@pytest.mark.e2e
def test_lease_pool_never_shares_a_gpu(tmp_path):
    pool = GpuPool(tmp_path / "pool.json", [0, 1, 2, 3])
    a = pool.try_acquire(2, "a")
    b = pool.try_acquire(2, "b")
    assert a and b and not set(a) & set(b)
    assert pool.try_acquire(1, "c") is None
    assert pool.release(a, "a") == ["b"]
    assert pool.try_acquire(2, "c") == a
    with mp.Manager() as m:
        out = m.dict()
        procs = [mp.Process(target=_hold, args=(tmp_path / "p2.json", 2, out, f"k{i}")) for i in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        held = dict(out)
    assert len(held) == 4
    # any two leases that overlapped in time used disjoint GPUs
    for k1, (g1, t1) in held.items():
        for k2, (g2, t2) in held.items():
            if k1 < k2 and abs(t1 - t2) < 0.5:
                assert not set(g1) & set(g2)


def test_exclusive_lease_takes_the_whole_machine(tmp_path):
    pool = GpuPool(tmp_path / "pool.json", [0, 1, 2, 3])
    assert pool.try_acquire(2, "a", exclusive=True) == [0, 1]
    assert pool.try_acquire(1, "b") is None


def test_dead_holder_lease_is_reclaimed(tmp_path):
    pool = GpuPool(tmp_path / "pool.json", [0, 1])
    pool.try_acquire(2, "a")
    import json
    state = json.loads(pool.path.read_text())
    for lease in state["held"].values():
        lease["pid"] = 2 ** 22 + 12345      # no such process
    pool.path.write_text(json.dumps(state))
    assert pool.try_acquire(2, "b") == [0, 1]
