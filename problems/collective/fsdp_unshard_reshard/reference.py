import torch
import torch.distributed as dist


def solution(param_shard: torch.Tensor, full_grad: torch.Tensor):
    world = dist.get_world_size()
    shard = param_shard.numel()

    # unshard: gather the flat parameter from every rank's shard
    full_param = param_shard.new_empty(world * shard)
    dist.all_gather_into_tensor(full_param, param_shard)

    # reshard: reduce-scatter the full gradient, averaged over ranks
    grad_shard = full_grad.new_empty(shard)
    dist.reduce_scatter_tensor(grad_shard, full_grad)
    grad_shard.div_(world)
    return full_param, grad_shard
