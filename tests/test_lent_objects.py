"""Inputs that are not plain data cross into the candidate process (and the reference process) as
they did when the candidate ran beside the harness: a torch.nn.Module (its tensors lent like every
other input), the default process group and a group of some ranks (the receiving process's own
group of the same ranks), and an in-place problem whose reference rebinds elements of an input
list instead of writing them. ParallelKernelBench passes all of these; each failed as a
harness_error or a mismatch with the split before they were carried (CPU, gloo, W=4).
"""
from __future__ import annotations

import pytest
from kbrun import by_problem, explain, make_tree, run

pytestmark = pytest.mark.e2e

MODULE_HARNESS = '''
import torch
import torch.distributed as dist
from pytest_kernelbench.harnesslib import exact_values

def inputs(size, rank, world_size, gen, device, dtype):
    n = size["n"]
    lin = torch.nn.Linear(16, 16, bias=True).to(device=device, dtype=dtype)
    with torch.no_grad():
        lin.weight.copy_(exact_values((16, 16), gen, device, dtype))
        lin.bias.copy_(exact_values((16,), gen, device, dtype))
    pair = _pair(rank, world_size)
    return (exact_values((n // 16, 16), gen, device, dtype), lin, dist.group.WORLD, pair)

_PAIRS = {}

def _pair(rank, world):
    # every rank makes every pair group, in the same order (new_group is collective on the world)
    if not _PAIRS:
        for lo in range(0, world, 2):
            _PAIRS[lo] = dist.new_group([lo, lo + 1])
    return _PAIRS[rank - rank % 2]

def cost(size, world_size, dtype):
    return {"link_bytes": 0.0, "hbm_bytes": 4.0 * size["n"], "flops": 0.0}
'''

MODULE_REFERENCE = '''
import torch
import torch.distributed as dist

def solution(x, lin, world, pair):
    y = x.clone()
    dist.all_reduce(y, group=world)
    z = x.clone()
    dist.all_reduce(z, group=pair)          # the sum over this rank's pair only
    with torch.no_grad():
        return lin(y) + z
'''

REBIND_HARNESS = '''
import torch
from pytest_kernelbench.harnesslib import exact_values

def inputs(size, rank, world_size, gen, device, dtype):
    n = size["n"]
    return ([exact_values((n,), gen, device, dtype) for _ in range(2)],)

def cost(size, world_size, dtype):
    return {"link_bytes": 0.0, "hbm_bytes": 4.0 * size["n"], "flops": 0.0}
'''

REBIND_REFERENCE = '''
import torch
import torch.distributed as dist

def solution(xs):
    for i in range(len(xs)):
        y = xs[i] * 2
        dist.all_reduce(y)
        xs[i] = y                 # rebinds the list element: the tensor it held is not written
    return xs
'''


@pytest.fixture(scope="module")
def lent(tmp_path_factory):
    root = tmp_path_factory.mktemp("lent")
    problems, _ = make_tree(root, {"module_and_groups": "", "rebind_inplace": ""},
                            yaml_patch={"forbid": [], "world_sizes": [4]})
    for name, harness, reference in (("module_and_groups", MODULE_HARNESS, MODULE_REFERENCE),
                                     ("rebind_inplace", REBIND_HARNESS, REBIND_REFERENCE)):
        folder = problems / "collective" / name
        (folder / "harness.py").write_text(harness)
        (folder / "reference.py").write_text(reference)
    import yaml
    y = problems / "collective" / "rebind_inplace" / "problem.yaml"
    data = yaml.safe_load(y.read_text())
    data["inplace"] = True
    y.write_text(yaml.safe_dump(data, sort_keys=False))
    proc, doc = run(root, str(problems), "--kb-candidate=reference", "--kb-timeout=90", timeout=600)
    assert doc is not None, proc.stdout[-4000:] + proc.stderr[-4000:]
    return by_problem(doc)


@pytest.mark.parametrize("name", ["module_and_groups", "rebind_inplace"])
def test_objects_that_are_not_data_reach_both_solver_processes(lent, name):
    it = lent[f"collective/{name}"]
    assert it["outcome"] == "passed", explain(it)
    assert it["sizes"][0]["timing"]["window_us"]["reference"], "timed through the reference process"
