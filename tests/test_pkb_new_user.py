"""ParallelKernelBench as a new user meets it (issue 45, point 6), on the PKB-format fixture
(pkb_fixture.py, never PKB's files): --kb-solutions-only on a CPU machine, a process group in an
in-place problem's arguments, and a reference that needs a module this install lacks."""
from __future__ import annotations

import os

import pytest
from kbrun import inner_env, run
from pkb_fixture import RING, make_checkout

from pytest_kernelbench.protocol import SOLUTIONS_ONLY_SKIP


@pytest.mark.e2e
def test_solutions_only_leaves_out_pkb_items_that_cannot_run_here(tmp_path):
    """One kernel of one's own against the suite on CPU: 19 (CUDA only) has no file, so it is left
    out like every problem without one, not failed as no_code with two chained exceptions."""
    pkb = make_checkout(tmp_path / "pkb")
    (pkb / "reference" / "4_reduce.py").unlink()        # a reference that does not load errors in every run
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "1_allreduce_cuda.py").write_text(RING)
    proc, doc = run(tmp_path, f"--kb-pkb={pkb}", f"--kb-solutions={mine}", "--kb-solutions-only",
                    "--kb-nproc=2", "--kb-timing=off", timeout=300)
    out = proc.stdout + proc.stderr
    assert doc is not None, out
    items = {i["problem"]: i for i in doc["items"]}
    assert items["pkb/1_allreduce"]["outcome"] == "passed", items["pkb/1_allreduce"].get("message")
    left = {k: (v["outcome"], v.get("message")) for k, v in items.items() if k != "pkb/1_allreduce"}
    assert left and all(v == ("skipped", SOLUTIONS_ONLY_SKIP) for v in left.values()), left
    assert proc.returncode == 0, out[-3000:]
    assert "During handling of the above exception" not in out
    # the table: the kernel that ran, and one line for the rest
    assert f"(and {len(left)} problem(s) without a file in --kb-solutions, skipped: --kb-solutions-only)" in out
    assert not any(line.startswith(tuple(left)) for line in proc.stdout.splitlines())
    # without --kb-solutions-only the missing file is the folder's no_code, told once (no chained Skip)
    (tmp_path / "report.json").unlink()
    (tmp_path / "report.jsonl").unlink()
    proc, doc = run(tmp_path, f"--kb-pkb={pkb}", f"--kb-solutions={mine}", "-k", "19_", "--kb-nproc=2", timeout=300)
    out = proc.stdout + proc.stderr
    assert [(i["problem"], i.get("failure")) for i in doc["items"]] == [("pkb/19_blocked_fp8_quantize", "no_code")], out
    assert "During handling of the above exception" not in out and out.count("no candidate for") <= 2, out


# our own imitation of PKB's 22: an EP x EP-FSDP grid of subgroups passed as arguments, in place
EP_GRID = '''    if problem_id == 22:                 # an EP x EP-FSDP grid of subgroups, as PKB's 22 builds
        _seed(problem_id, rank, trial)
        non_ep, ep = [torch.randn(base_shape, dtype=dtype, device=dev)], [torch.randn(base_shape, dtype=dtype, device=dev)]
        ep_size = max(1, world_size // 2)
        ep_group, ep_fsdp_group = None, dist.group.WORLD
        if ep_size > 1:
            for blk in range(world_size // ep_size):
                ranks = list(range(blk * ep_size, (blk + 1) * ep_size))
                g = dist.new_group(ranks)
                ep_group = g if rank in ranks else ep_group
            for i in range(ep_size):
                ranks = [i + blk * ep_size for blk in range(world_size // ep_size)]
                g = dist.new_group(ranks)
                ep_fsdp_group = g if rank in ranks else ep_fsdp_group
        return (non_ep, ep, 1.0, 2.0, ep_size, dist.group.WORLD, ep_fsdp_group, ep_group)
'''
CLIP_EP = '''import torch
import torch.distributed as dist


def _norms(tensors, p):
    return sum((t.float().norm(p=p) ** p for t in tensors), torch.zeros(()))


def solution(non_ep, ep, max_norm, norm_type=2.0, ep_size=1, fsdp_group=None, ep_fsdp_group=None, ep_group=None):
    if ep_size > 1:
        for t in ep:
            t.mul_(1.0 / ep_size)
    a, b = _norms(non_ep, norm_type), _norms(ep, norm_type)
    dist.all_reduce(a, group=fsdp_group)
    for group in (ep_fsdp_group, ep_group):
        if group is not None:
            dist.all_reduce(b, group=group)
    total = (a + b) ** (1.0 / norm_type)
    if total > max_norm:
        for t in non_ep + ep:
            t.mul_(max_norm / total)
    return total
'''


@pytest.mark.e2e
def test_self_check_of_an_in_place_problem_with_process_group_arguments_at_w4(tmp_path):
    """PKB's 22_clip_grad_norm_ep failed its own self-check at W = 4: the in-place check compared
    the process groups among its arguments by identity, and the candidate's side holds its own
    group object of the same ranks (rank/objects.py). At W = 2 its EP groups are None and WORLD."""
    pkb = make_checkout(tmp_path / "pkb")
    gen = pkb / "utils" / "input_output_tensors.py"
    text = gen.read_text()
    start = text.index("    if problem_id == 22:")
    gen.write_text(text[:start] + EP_GRID + text[text.index("    raise ValueError", start):])
    (pkb / "reference" / "22_clip_grad_norm_ep.py").write_text(CLIP_EP)
    proc, doc = run(tmp_path, f"--kb-pkb={pkb}", "-k", "22_", "--kb-candidate=reference", "--kb-nproc=4",
                    "--kb-timing=off", timeout=400)
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    item = next(i for i in doc["items"] if i["problem"] != "pkb/4_reduce")      # 4 does not load: in every -k
    assert (item["problem"], item["world_size"]) == ("pkb/22_clip_grad_norm_ep", 4)
    assert item["outcome"] == "passed", item.get("message")


# a Python without numpy, as the main job's install (torch does not require it): every finder is
# asked after this one, which says numpy is not there
NO_NUMPY_SITE = '''import sys


class _NoNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ModuleNotFoundError("No module named 'numpy' (hidden by the test)", name="numpy")
        return None


sys.meta_path.insert(0, _NoNumpy())
'''


@pytest.mark.e2e
def test_a_reference_that_needs_a_missing_module_skips_saying_so(tmp_path):
    """Two of PKB's references need numpy (64 imports it; 63 and 78 call all_gather_object, which
    torch unpacks with numpy); the main job's install has none, and the self-check was charged
    with it (runtime_error). A reference's missing module is this machine's, not the candidate's."""
    pkb = make_checkout(tmp_path / "pkb")
    (pkb / "reference" / "4_reduce.py").unlink()
    ref = pkb / "reference"
    (ref / "1_allreduce.py").write_text("import numpy as np\n" + (ref / "1_allreduce.py").read_text()
                                        + "\n\nassert np.int64(1) == 1\n")
    (ref / "3_broadcast.py").write_text('''import torch.distributed as dist


def solution(tensor, src=0):
    shapes = [None] * dist.get_world_size()
    dist.all_gather_object(shapes, tuple(tensor.shape))
    out = tensor.clone()
    dist.broadcast(out, src=src)
    return out
''')
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_NUMPY_SITE)
    env = {"PYTHONPATH": os.pathsep.join([str(site), inner_env()["PYTHONPATH"]])}
    proc, doc = run(tmp_path, f"--kb-pkb={pkb}", "-k", "1_allreduce or 3_broadcast", "--kb-candidate=reference",
                    "--kb-nproc=2", "--kb-timing=off", env=env, timeout=300)
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    items = {i["problem"]: i for i in doc["items"]}
    assert set(items) == {"pkb/1_allreduce", "pkb/3_broadcast"}
    for name, why in (("pkb/1_allreduce", "imports it"), ("pkb/3_broadcast", "calls all_gather_object")):
        assert items[name]["outcome"] == "skipped", (name, items[name].get("failure"), items[name].get("message"))
        assert items[name]["message"].startswith(f"the reference needs numpy ({why}"), items[name]["message"]
    assert proc.returncode == 0, proc.stdout[-2000:]
