import torch
import torch.distributed as dist


def solution(grads: torch.Tensor, param_shard: torch.Tensor, momentum_buf: torch.Tensor,
             lr: float, momentum: float, weight_decay: float):
    world = dist.get_world_size()

    # reduce-scatter the bfloat16 gradients: this rank receives the sum of its shard
    g = grads.new_empty(param_shard.numel())
    dist.reduce_scatter_tensor(g, grads)
    g = g.float().div_(world)

    # SGD with momentum and L2 weight decay on the float32 master shard
    g.add_(param_shard, alpha=weight_decay)
    buf = momentum_buf.mul(momentum).add_(g)
    new_param = param_shard.add(buf, alpha=-lr)
    return new_param, buf
