import torch
import torch.distributed as dist


def solution(x: torch.Tensor):
    world = dist.get_world_size()
    y = torch.empty_like(x)
    z = x.new_empty(x.numel() // world)
    work = dist.all_to_all_single(y, x, async_op=True)   # equal splits of n / W elements
    dist.reduce_scatter_tensor(z, x, op=dist.ReduceOp.SUM)
    work.wait()
    return y, z
