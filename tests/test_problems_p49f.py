"""The native problems of issue 49 (p2p/nvshmem_put_signal, ep/dropless_dispatch_atomics,
collective/nccl_device_alltoall): what their oracles accept and refuse, their cost() against the
bytes the task cannot avoid, and each reference on gloo against the task text's definition
(the kernels themselves need GPUs: tests/test_native.py compiles them where the libraries are)."""
from __future__ import annotations

import importlib.util
import os
import socket

import pytest
import torch
from kbrun import PROBLEMS

from pytest_kernelbench.rank import compare
from pytest_kernelbench.spec.problem import load_problem

NVSHMEM_A2A, DROPLESS, NCCL_A2A = "p2p/nvshmem_put_signal", "ep/dropless_dispatch_atomics", "collective/nccl_device_alltoall"
NEW = (NVSHMEM_A2A, DROPLESS, NCCL_A2A)


def _module(pid: str, name: str):
    spec = importlib.util.spec_from_file_location(f"p49f_{name}_{pid.replace('/', '_')}", PROBLEMS / pid / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _inputs(pid: str, size: str, world: int, seed: int = 0) -> list[tuple]:
    p, h = load_problem(PROBLEMS / pid / "problem.yaml", PROBLEMS), _module(pid, "harness")
    gens = [torch.Generator().manual_seed(seed * 100 + r) for r in range(world)]
    return [h.inputs(p.sizes[size], r, world, gens[r], torch.device("cpu"), getattr(torch, p.dtype)) for r in range(world)]


# ---- the dropless dispatch: any order, nothing lost or doubled -------------------------------------------
def _dispatch(ins: list[tuple], rank: int):
    """What rank `rank` receives, in the reference's order (by source, then token)."""
    world, (tokens, hidden) = len(ins), ins[0][0].shape
    rows, ids = [], []
    for s, (x, in_rank) in enumerate(ins):
        sent = in_rank[:, rank].nonzero().flatten()
        rows.append(x[sent])
        ids.append((sent + s * tokens).int())
    n = sum(len(i) for i in ids)
    recv_x = torch.zeros(world * tokens, hidden, dtype=ins[0][0].dtype)
    recv_ids = torch.full((world * tokens,), -1, dtype=torch.int32)
    recv_x[:n], recv_ids[:n] = torch.cat(rows), torch.cat(ids)
    return recv_x, recv_ids, torch.tensor([n], dtype=torch.int32)


def _shuffled(out, seed=1):
    x, ids, n = (t.clone() for t in out)
    k = int(n[0])
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(seed))
    x[:k], ids[:k] = x[:k][perm], ids[:k][perm]
    x[k:], ids[k:] = 7, 12345                       # rows past the count are not looked at
    return x, ids, n


@pytest.mark.parametrize("world", [2, 4])
def test_dropless_check_accepts_the_rows_in_any_order(world):
    h = _module(DROPLESS, "harness")
    ins = _inputs(DROPLESS, "tiny", world)
    for rank in range(world):
        expected = _dispatch(ins, rank)
        h.check(expected, expected, ins[rank], {})
        for seed in (1, 2, 3):
            h.check(_shuffled(expected, seed), expected, ins[rank], {})
    # the suite's default comparison (allclose in the reference's order) would fail this honest kernel
    p = load_problem(PROBLEMS / DROPLESS / "problem.yaml", PROBLEMS)
    assert compare.values(_shuffled(expected), expected, dict(p.tolerance))[0] is not None


@pytest.mark.parametrize("plant, message", [
    ("lost", r"1 lost .* 1 duplicated"),           # a row written twice where another never arrived
    ("foreign", r"1 lost .* 1 not sent here"),     # a row of a token that was not sent to this rank
    ("stale", r"received rows differ .* first: token \d+ of rank \d+"),   # right ids, last call's data
    ("count", r"out\[2\] \(recv_count\)"),         # one row short
    ("swapped", r"received rows differ"),          # ids and rows out of step
])
def test_dropless_check_fails_lost_duplicated_foreign_and_stale_rows(plant, message):
    h = _module(DROPLESS, "harness")
    ins, older = _inputs(DROPLESS, "tiny", 2, seed=0), _inputs(DROPLESS, "tiny", 2, seed=9)
    expected = _dispatch(ins, 0)
    x, ids, n = _shuffled(expected)
    k = int(n[0])
    if plant == "lost":
        x[1], ids[1] = x[0], ids[0]
    elif plant == "foreign":
        tokens = ins[0][0].shape[0]
        not_here = [s * tokens + t for s in range(2) for t in range(tokens) if not bool(ins[s][1][t, 0])]
        ids[0] = not_here[0]
    elif plant == "stale":
        tokens = ins[0][0].shape[0]
        x[:k] = torch.stack([older[int(i) // tokens][0][int(i) % tokens] for i in ids[:k]])
    elif plant == "count":
        n = n - 1
    elif plant == "swapped":
        x[[0, 1]] = x[[1, 0]]
    with pytest.raises(AssertionError, match=message):
        h.check((x, ids, n), expected, ins[0], {})


# ---- the all-to-all + reduce-scatter: one exchange, exact sums --------------------------------------------
def _alltoall_rs(ins: list[tuple], rank: int):
    world = len(ins)
    chunks = [x.chunk(world) for (x,) in ins]
    y = torch.cat([chunks[q][rank] for q in range(world)])
    z = torch.stack([chunks[q][rank].float() for q in range(world)]).sum(0).to(ins[0][0].dtype)
    return y, z


@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_reduce_scatter_is_exact_in_any_order_and_a_missing_rank_or_wrong_peer_fails(world):
    p = load_problem(PROBLEMS / NCCL_A2A / "problem.yaml", PROBLEMS)
    ins = _inputs(NCCL_A2A, "xsmall", world)
    y, z = _alltoall_rs(ins, 1)
    chunks = [x.chunk(world)[1] for (x,) in ins]
    # bfloat16 accumulation in reverse rank order: exact on the harness's values, so bit for bit
    backwards = chunks[-1].clone()
    for c in reversed(chunks[:-1]):
        backwards = backwards + c
    assert torch.equal(backwards, z)
    assert compare.values((y, z), (y, z), dict(p.tolerance))[0] is None
    skip = torch.stack([c.float() for c in chunks[:-1]]).sum(0).to(z.dtype)       # one rank left out
    assert compare.values((y, skip), (y, z), dict(p.tolerance))[0] is not None
    wrong_peer = torch.cat([c for c in reversed(y.chunk(world))])                 # chunks in the wrong order
    assert compare.values((wrong_peer, z), (y, z), dict(p.tolerance))[0] is not None
    half = y.clone()
    half[y.numel() // 2:] = 0                                                     # half the output
    assert compare.values((half, z), (y, z), dict(p.tolerance))[0] is not None


# ---- cost(): the bytes no legal algorithm avoids ----------------------------------------------------------
@pytest.mark.parametrize("world", [2, 4, 8])
def test_costs_are_the_unavoidable_bytes(world):
    for pid in (NVSHMEM_A2A, NCCL_A2A):
        p, h = load_problem(PROBLEMS / pid / "problem.yaml", PROBLEMS), _module(pid, "harness")
        for cfg in p.sizes.values():
            b = cfg["n"] * 2
            c = h.cost(cfg, world, torch.bfloat16)
            # each rank receives W - 1 chunks of n / W values; the reduce-scatter needs the same ones
            assert c["link_bytes"] == pytest.approx((world - 1) / world * b)
    p, h = load_problem(PROBLEMS / DROPLESS / "problem.yaml", PROBLEMS), _module(DROPLESS, "harness")
    cfg = p.sizes["medium"]
    c = h.cost(cfg, world, torch.bfloat16)
    # the expected rows a rank sends to the W - 1 others, against the harness's own routing
    _, in_rank = h.inputs(cfg, 0, world, torch.Generator().manual_seed(5), torch.device("cpu"), torch.bfloat16)
    sent = float(in_rank[:, 1:].sum())
    assert c["link_bytes"] == pytest.approx(sent * (cfg["hidden"] * 2 + 4), rel=0.05)


def test_every_new_problem_has_a_size_below_1_mib_per_rank():
    for pid in NEW:
        p, h = load_problem(PROBLEMS / pid / "problem.yaml", PROBLEMS), _module(pid, "harness")
        small = [name for name, cfg in p.sizes.items() if name != "tiny" and sum(
            t.numel() * t.element_size() for t in h.inputs(cfg, 0, 8, torch.Generator(), torch.device("meta"),
                                                           getattr(torch, p.dtype))) < 1 << 20]
        assert small, f"{pid}: no size but tiny below 1 MiB"


# ---- the references on gloo against the definitions in the task text ---------------------------------------
def _rank_main(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    for pid in (DROPLESS, NCCL_A2A, NVSHMEM_A2A):
        ins = _inputs(pid, "tiny", world)
        results[pid] = _module(pid, "reference").solution(*ins[rank])
    torch.save(results, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.e2e
@pytest.mark.parametrize("world", [2, 4])
def test_each_reference_computes_what_its_task_text_says(tmp_path, world):
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_rank_main, args=(world, port, str(tmp_path)), nprocs=world, start_method="fork")
    for rank in range(world):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        ins = _inputs(DROPLESS, "tiny", world)
        _module(DROPLESS, "harness").check(got[DROPLESS], _dispatch(ins, rank), ins[rank], {})
        y, z = _alltoall_rs(_inputs(NCCL_A2A, "tiny", world), rank)
        assert torch.equal(got[NCCL_A2A][0], y) and torch.equal(got[NCCL_A2A][1], z)
        y, _ = _alltoall_rs(_inputs(NVSHMEM_A2A, "tiny", world), rank)
        assert torch.equal(got[NVSHMEM_A2A], y)
