import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    f_local = w_down.shape[0]
    # sequence-parallel entry: every rank needs every token
    x_full = x.new_empty(world * x.shape[0], x.shape[1])
    dist.all_gather_into_tensor(x_full, x)
    gate_up = torch.matmul(x_full, w_gate_up)                  # one GEMM for gate and up
    act = F.silu(gate_up[:, :f_local]) * gate_up[:, f_local:]
    partial = torch.matmul(act, w_down)                        # this rank's share of every token's output
    # sequence-parallel exit: sum the shares, keep this rank's tokens
    out = partial.new_empty(x.shape)
    dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM)
    return out
