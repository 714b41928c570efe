"""Every problem folder follows the format: valid yaml, harness functions, positive cost for every
size and world size, rank-dependent inputs whose shapes depend only on (size, rank, W)."""
from __future__ import annotations

import importlib.util

import pytest
import torch
from kbrun import PROBLEMS

from pytest_kernelbench.spec.problem import load_problem

FOLDERS = sorted(p.parent for p in PROBLEMS.glob("*/*/problem.yaml"))


def harness(folder):
    spec = importlib.util.spec_from_file_location(f"h_{folder.name}", folder / "harness.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from tensors(v)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.relative_to(PROBLEMS).as_posix())
def test_problem_folder_format(folder):
    problem = load_problem(folder / "problem.yaml", PROBLEMS)
    h = harness(folder)
    dtype = getattr(torch, problem.dtype)
    for w in problem.world_sizes:
        for name, cfg in problem.sizes.items():
            cost = h.cost(cfg, w, dtype)
            assert set(cost) <= {"link_bytes", "inter_node_bytes", "hbm_bytes", "flops", "messages"}, cost
            if problem.nodes > 1 and w % problem.nodes == 0:
                # a multi-node problem's cost() takes nodes= and charges the network apart
                spread = h.cost(cfg, w, dtype, nodes=problem.nodes)
                assert spread.get("inter_node_bytes", 0) > 0, (name, w, spread)
            assert all(v >= 0 for v in cost.values()) and sum(cost.values()) > 0, (name, w, cost)
            # dependent communication steps: a whole number, and only where bytes cross a link
            msgs = cost.get("messages")
            assert msgs is None or (msgs == int(msgs) and (msgs >= 1) == (cost.get("link_bytes", 0) > 0)), cost
            assert cost.get("link_bytes", 0) > 0 or w == 1, f"{name} W={w}: no link bytes"
    tiny = problem.sizes["tiny"]
    w = min(problem.world_sizes)
    per_rank = []
    for rank in range(w):
        draws = []
        for seed in (1, 2):
            g = torch.Generator().manual_seed(seed * 1000 + rank)
            draws.append(h.inputs(tiny, rank, w, g, torch.device("cpu"), dtype))
        a, b = ([(t.shape, t.dtype) for t in tensors(d)] for d in draws)
        assert a == b, "input shapes must depend only on (size, rank, world_size)"
        assert any(not torch.equal(x, y) for x, y in zip(tensors(draws[0]), tensors(draws[1]))), "inputs ignore gen"
        per_rank.append(draws[0])
    if w == 1:      # a single-GPU problem (native utilities): no peer to differ from
        return
    assert any(not torch.equal(x, y) for x, y in zip(tensors(per_rank[0]), tensors(per_rank[1]))
               if x.shape == y.shape) or any(x.shape != y.shape for x, y in zip(tensors(per_rank[0]), tensors(per_rank[1]))), \
        "inputs must differ across ranks"
