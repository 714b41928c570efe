"""Baseline: torch's symmetric-memory reduce-scatter (torch.ops.symm_mem._low_contention_reduce_scatter):
x is copied into torch's symmetric workspace, each rank pulls its chunk from every peer with copy
engines, then sums them locally. No multicast: the harness sets TORCH_SYMM_MEM_DISABLE_MULTICAST=1
and NCCL_NVLS_ENABLE=0, and this file never touches them. Trusted, timed in the reference process
(--kb-baselines); never shown to candidates."""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory  # noqa: F401 - registers torch.ops.symm_mem


def solution(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.symm_mem._low_contention_reduce_scatter(x, "sum", dist.group.WORLD.group_name)
