import torch
import torch.distributed as dist

_groups: dict = {}


def chunk_sizes(n: int, k: int) -> list[int]:
    """torch.chunk's split of n into k parts, with the empty parts it leaves out (DTensor's Shard)."""
    q = -(-n // k)
    return [max(0, min(q, n - i * q)) for i in range(k)]


def mesh_groups(world: int):
    """(this rank's mesh-dim-0 group, its mesh-dim-1 group) of the 2 x (W/2) mesh; rank = i*(W/2) + j."""
    if world not in _groups:
        half = world // 2
        rank = dist.get_rank()
        dim0 = [dist.new_group([j, half + j]) for j in range(half)]             # same j, i = 0, 1
        dim1 = [dist.new_group(list(range(i * half, (i + 1) * half))) for i in range(2)]
        _groups[world] = (dim0[rank % half], dim1[rank // half])
    return _groups[world]


def solution(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    world, rank = dist.get_world_size(), dist.get_rank()
    half = world // 2
    i, j = rank // half, rank % half
    g0, g1 = mesh_groups(world)
    outer = chunk_sizes(rows, 2)                  # rows per mesh-dim-0 coordinate
    inner = chunk_sizes(outer[i], half)           # rows per mesh-dim-1 coordinate, inside it
    col = chunk_sizes(cols, half)

    # mesh dim 1: Shard(0) -> Shard(1), an all-to-all of column blocks within the row group
    send = torch.cat([b.reshape(-1) for b in x.split(col, dim=1)])
    recv = x.new_empty(outer[i] * col[j])
    dist.all_to_all_single(recv, send, output_split_sizes=[r * col[j] for r in inner],
                           input_split_sizes=[x.shape[0] * c for c in col], group=g1)
    block = recv.view(outer[i], col[j])           # rows of chunk i, columns of chunk j

    # mesh dim 0: Shard(0) -> Replicate, an all-gather padded to the larger chunk (as DTensor pads)
    pad = outer[0]
    padded = block.new_zeros(pad, col[j])
    padded[:outer[i]] = block
    gathered = block.new_empty(2 * pad, col[j])
    dist.all_gather_into_tensor(gathered, padded, group=g0)
    return torch.cat([gathered[:outer[0]], gathered[pad:pad + outer[1]]])
