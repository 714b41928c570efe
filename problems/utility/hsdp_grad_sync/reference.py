import torch
import torch.distributed as dist

_MESH: dict = {}


def _mesh():
    """(shards per replica, this rank's shard group, its replica group), made once: 2 x W/2."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if world not in _MESH:
        shards = world // 2
        shard_group = replica_group = None
        if shards > 1:
            for r in range(2):                   # every rank makes every group, in one order
                g = dist.new_group(list(range(r * shards, (r + 1) * shards)))
                if rank // shards == r:
                    shard_group = g
        for s in range(shards):
            g = dist.new_group(list(range(s, world, shards)))
            if rank % shards == s:
                replica_group = g
        _MESH[world] = (shards, shard_group, replica_group)
    return _MESH[world]


def solution(grad: torch.Tensor) -> torch.Tensor:
    shards, shard_group, replica_group = _mesh()
    full = grad.float()                          # reduce_dtype=float32
    if shards > 1:
        shard = torch.empty(grad.numel() // shards, dtype=torch.float32, device=grad.device)
        dist.reduce_scatter_tensor(shard, full, group=shard_group)
    else:
        shard = full
    dist.all_reduce(shard, group=replica_group)
    return shard.div_(dist.get_world_size())
