"""Baseline: torch's symmetric-memory all-gather (torch.ops.symm_mem._low_contention_all_gather):
x is copied into torch's symmetric workspace, then every rank pulls each peer's shard with copy
engines (no SMs in the transfer). No multicast: the harness sets TORCH_SYMM_MEM_DISABLE_MULTICAST=1
and NCCL_NVLS_ENABLE=0, and this file never touches them. Trusted, timed in the reference process
(--kb-baselines); never shown to candidates."""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory  # noqa: F401 - registers torch.ops.symm_mem


def solution(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.symm_mem._low_contention_all_gather(x, dist.group.WORLD.group_name)
