"""Baseline: torch's symmetric-memory one-shot all-reduce, in place (x copied into a symmetric
buffer, torch.ops.symm_mem.one_shot_all_reduce_out reads every peer's buffer over NVLink and writes
the sum into x, one barrier): what vLLM and SGLang use for decode-sized all-reduces. Its buffer is
allocated and rendezvoused once per size. No multicast: the harness sets
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NCCL_NVLS_ENABLE=0, and this file never touches them.
Trusted, timed in the reference process (--kb-baselines); never shown to candidates."""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_buffers: dict = {}


def _buffer(x: torch.Tensor) -> torch.Tensor:
    key = (x.numel(), x.dtype, x.device)
    if key not in _buffers:
        buf = symm_mem.empty(x.numel(), dtype=x.dtype, device=x.device)
        symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
        _buffers[key] = buf
    return _buffers[key]


def solution(x: torch.Tensor) -> torch.Tensor:
    buf = _buffer(x)
    buf.copy_(x)
    return torch.ops.symm_mem.one_shot_all_reduce_out(buf, "sum", dist.group.WORLD.group_name, x)
