import torch
import torch.distributed as dist


def solution(k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    num_blocks, block_size = k_cache.shape[:2]
    block_shape = k_cache.shape[1:]
    bsz, max_blocks = block_table.shape

    # every rank learns every rank's block table (same shape everywhere)
    tables = block_table.new_empty(world * bsz, max_blocks)
    dist.all_gather_into_tensor(tables, block_table)
    tables = tables.view(world, bsz * max_blocks)

    # blocks this rank serves, grouped by requesting rank, each group in (row, block) order
    served = tables // num_blocks == rank
    send_idx = tables[served] % num_blocks
    send_splits = served.sum(dim=1).tolist()

    # blocks this rank receives arrive grouped by owner rank, each group in (row, block) order
    owner = block_table.flatten() // num_blocks
    recv_splits = torch.bincount(owner, minlength=world).tolist()
    order = torch.argsort(owner, stable=True)

    outs, works, recvs = [], [], []
    for cache in (k_cache, v_cache):
        recv = cache.new_empty(bsz * max_blocks, *block_shape)
        works.append(dist.all_to_all_single(recv, cache.index_select(0, send_idx), recv_splits, send_splits,
                                            async_op=True))
        recvs.append(recv)
    for work, recv in zip(works, recvs):
        work.wait()
        out = torch.empty_like(recv)
        out.index_copy_(0, order, recv)        # back to (row, block) order
        outs.append(out.view(bsz, max_blocks * block_size, *block_shape[1:]))
    return tuple(outs)
