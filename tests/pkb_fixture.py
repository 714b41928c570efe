"""A tiny ParallelKernelBench-format tree for the tests: our own imitation of PKB's layout
(reference/<N>_<name>.py with solution(), utils/input_output_tensors.py with create_input_tensor()
seeding the global RNG PKB's way), never PKB's files. Its stems reuse PKB's names so that the
taxonomy and the CPU census (pytest_kernelbench/pkb/eligibility.py) apply: 1, 3, 5-8, 12, 18, 70
run on gloo; 19 is CUDA only; 4 is broken (no solution()). Candidates are in PKB's layout, two of
them under the names PKB's published solutions use (12_gemm_allgather, 18_rms_norm)."""
from __future__ import annotations

from pathlib import Path

GENERATOR = '''import torch
import torch.distributed as dist


def _seed(problem_id, rank, trial=0):
    torch.manual_seed(11 + 100 * problem_id + rank + 7919 * trial)


def create_input_tensor(rank, world_size, problem_id, base_shape, dtype, trial=0, device=None):
    dev = torch.device("cuda", rank) if device is None else device
    M, N = base_shape
    if problem_id in (1, 3, 6):          # constants, as PKB's collectives: nothing random
        return (torch.full(base_shape, float(rank + 1), dtype=dtype, device=dev),)
    if problem_id == 5:
        if rank == 0:
            return (torch.stack([torch.full(base_shape, float(i), dtype=dtype, device=dev)
                                 for i in range(world_size)]),)
        return (torch.zeros(base_shape, dtype=dtype, device=dev),)
    if problem_id == 7:
        _seed(problem_id, rank, trial)
        return (torch.randn((world_size * M, N), dtype=dtype, device=dev),)
    if problem_id == 8:
        return (torch.full((world_size, M, N), float(rank), dtype=dtype, device=dev),)
    if problem_id == 12:
        _seed(problem_id, rank, trial)
        return (torch.randn((M, 16), dtype=dtype, device=dev), torch.randn((16, N), dtype=dtype, device=dev))
    if problem_id in (18, 19):
        _seed(problem_id, rank, trial)
        return (torch.randn((M, N), dtype=dtype, device=dev),)
    if problem_id == 70:                 # shapes drawn at random, as PKB's 70: values sized by sum(lengths)
        _seed(problem_id, rank, trial)
        lengths = torch.randint(1, 9, (8,), device=dev)
        return (lengths, torch.randn((int(lengths.sum().item()),), dtype=dtype, device=dev))
    if problem_id == 20:                 # data every rank shares (a rank-free seed), then its own
        _seed(problem_id, 0, trial)
        shared = torch.randn((4, 8), dtype=dtype, device=dev)
        _seed(problem_id, rank, trial)
        return (shared, torch.randn((4, 8), dtype=dtype, device=dev), 0.5)
    if problem_id == 21:                 # sizes do not matter here
        _seed(problem_id, rank, trial)
        return (torch.randn((3, 5), dtype=dtype, device=dev),)
    if problem_id == 22:                 # makes a process group, as PKB's 55-57 do
        group = dist.new_group(list(range(world_size)))
        return (torch.full(base_shape, 1.0, dtype=dtype, device=dev), group)
    raise ValueError(f"no problem {problem_id}")
'''

REFERENCES = {
    "1_allreduce": '''import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out
''',
    "3_broadcast": '''import torch.distributed as dist


def solution(tensor, src=0):
    out = tensor.clone()
    dist.broadcast(out, src=src)
    return out
''',
    "4_reduce": '''import torch.distributed as dist


def reduce_it(tensor):       # no solution(): the item is an invalid problem
    dist.reduce(tensor, dst=0)
    return tensor
''',
    "5_scatter": '''import torch.distributed as dist


def solution(tensor, src=0):
    rank = dist.get_rank()
    if rank == src:
        parts = [c.squeeze(0).contiguous() for c in tensor.chunk(dist.get_world_size())]
        out = parts[0].new_empty(parts[0].shape)
    else:
        parts, out = None, tensor.clone()
    dist.scatter(out, scatter_list=parts, src=src)
    return out
''',
    "6_gather": '''import torch
import torch.distributed as dist


def solution(tensor, dst=0):
    if dist.get_rank() != dst:
        dist.gather(tensor, gather_list=None, dst=dst)
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.gather(tensor, gather_list=parts, dst=dst)
    return torch.stack(parts)
''',
    "7_reducescatter": '''import torch.distributed as dist


def solution(tensor):
    out = tensor.new_empty((tensor.shape[0] // dist.get_world_size(),) + tuple(tensor.shape[1:]))
    dist.reduce_scatter_tensor(out, tensor)
    return out
''',
    "8_alltoall": '''import torch
import torch.distributed as dist


def solution(tensor):
    out = torch.empty_like(tensor)
    dist.all_to_all_single(out, tensor)
    return out
''',
    "12_allgather_gemm": '''import torch
import torch.distributed as dist


def solution(a, b):
    parts = [torch.empty_like(a) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, a)
    return torch.cat(parts) @ b
''',
    "18_tp_rms_norm": '''import torch
import torch.distributed as dist


def solution(x):
    sq = x.float().pow(2).sum(-1, keepdim=True)
    dist.all_reduce(sq)
    return (x.float() * torch.rsqrt(sq / (x.shape[-1] * dist.get_world_size()) + 1e-6)).to(x.dtype)
''',
    "19_blocked_fp8_quantize": '''def solution(x):
    return (x * 2).contiguous()
''',
    "70_torchrec_kjt_all2all": '''import torch
import torch.distributed as dist


def solution(lengths, values):
    segment = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    sums = torch.zeros(lengths.numel()).index_add_(0, segment, values.float())
    dist.all_reduce(sums)
    return sums.to(values.dtype)
''',
}

# candidates in PKB's layout (<stem>_cuda.py), one behaviour per item
RING = '''import time

import torch
import torch.distributed as dist
from utils.cuda_helpers import compile_cuda_extension   # PKB's helper, from our shim

assert callable(compile_cuda_extension)
built = []


def solution(tensor):
    if not built:                # a first call that compiles (a child burning CPU, as a compiler does):
        import subprocess, sys   # on the compile budget, not the deadline
        subprocess.run([sys.executable, "-c", "import time\\nt = time.time()\\nwhile time.time() - t < 2.5: pass"])
        built.append(1)
    if bool((tensor == tensor.flatten()[0]).all()):
        raise RuntimeError("constant input: PKB's fill values reached the candidate")
    rank, world = dist.get_rank(), dist.get_world_size()
    acc, buf = tensor.float(), torch.empty_like(tensor)
    for step in range(1, world):
        req = dist.isend(tensor, (rank + step) % world)
        dist.recv(buf, (rank - step) % world)
        req.wait()
        acc += buf.float()
    return acc.to(tensor.dtype)
'''
PRECOMPUTED = '''import torch


def solution(tensor, src=0):
    # what PKB's generator gives rank 0 (a constant 1.0): right under fixed inputs only
    return torch.full_like(tensor, 1.0)
'''
MULTICAST = '''def solution(tensor, src=0):
    store = "multimem.st.global.f32"    # the PTX a multicast kernel would issue (never built here)
    return tensor
'''
# PKB's gather returns its input on non-root ranks: legal here because the item is checked in place
GATHER = '''import torch
import torch.distributed as dist


def solution(tensor, dst=0):
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank != dst:
        dist.send(tensor, dst)
        return tensor
    parts = [tensor.clone()]
    for peer in range(world):
        if peer != rank:
            buf = torch.empty_like(tensor)
            dist.recv(buf, peer)
            parts.insert(peer, buf)
    return torch.stack(parts)
'''
COLLECTIVE = '''import torch.distributed as dist


def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out.chunk(dist.get_world_size())[dist.get_rank()].clone()
'''
HANGS = '''import time

import torch
import torch.distributed as dist

calls = []


def solution(tensor):
    calls.append(1)
    if len(calls) > 1:
        time.sleep(3600)
    rank, world = dist.get_rank(), dist.get_world_size()
    out = torch.empty_like(tensor)
    out[rank] = tensor[rank]
    reqs = [dist.isend(tensor[p].contiguous(), p) for p in range(world) if p != rank]
    for p in range(world):
        if p != rank:
            buf = torch.empty_like(tensor[p])
            dist.recv(buf, p)
            out[p] = buf
    for r in reqs:
        r.wait()
    return out
'''
# published-layout name of 12: right, but for a dist.barrier() (PKB's prompt example has one)
BARRIER = '''import torch
import torch.distributed as dist


def solution(a, b):
    rank, world = dist.get_rank(), dist.get_world_size()
    parts = [None] * world
    parts[rank] = a
    reqs = [dist.isend(a, p) for p in range(world) if p != rank]
    for p in range(world):
        if p != rank:
            parts[p] = torch.empty_like(a)
            dist.recv(parts[p], p)
    for r in reqs:
        r.wait()
    dist.barrier()
    return torch.cat(parts) @ b
'''
# published-layout name of 18: a CUDA extension (skipped on a CPU item, not run into CUDA_HOME errors)
CUDA_EXTENSION = '''from utils.cuda_helpers import compile_cuda_extension

_ext = None


def solution(x):
    global _ext
    if _ext is None:
        _ext = compile_cuda_extension("rms", "__global__ void k() {}")
    return _ext.rms(x)
'''
BROKEN = '''def solution(x)
    return x
'''
# 70: the segment sums with a point-to-point exchange in place of the all_reduce
SEGMENTS = '''import torch
import torch.distributed as dist


def solution(lengths, values):
    segment = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    sums = torch.zeros(lengths.numel()).index_add_(0, segment, values.float())
    rank, world = dist.get_rank(), dist.get_world_size()
    total, buf = sums.clone(), torch.empty_like(sums)
    for step in range(1, world):
        req = dist.isend(sums, (rank + step) % world)
        dist.recv(buf, (rank - step) % world)
        req.wait()
        total += buf
    return total.to(values.dtype)
'''
CANDIDATES = {"1_allreduce": RING, "3_broadcast": PRECOMPUTED, "5_scatter": MULTICAST, "6_gather": GATHER,
              "7_reducescatter": COLLECTIVE, "8_alltoall": HANGS, "12_gemm_allgather": BARRIER,
              "18_rms_norm": CUDA_EXTENSION, "19_blocked_fp8_quantize": BROKEN, "70_torchrec_kjt_all2all": SEGMENTS,
              "99_no_such_problem": RING}


def make_checkout(root: Path) -> Path:
    (root / "reference").mkdir(parents=True)
    (root / "utils").mkdir()
    (root / "utils" / "input_output_tensors.py").write_text(GENERATOR)
    for stem, text in REFERENCES.items():
        (root / "reference" / f"{stem}.py").write_text(text)
    return root


def make_solutions(root: Path, backend: str = "cuda") -> Path:
    root.mkdir(parents=True)
    for stem, text in CANDIDATES.items():
        (root / f"{stem}_{backend}.py").write_text(text)
    return root
