import torch
import torch.distributed as dist


def solution(kv_cache: torch.Tensor, block_ids: torch.Tensor, flags: torch.Tensor, tag: torch.Tensor):
    rank = dist.get_rank()
    layers, n = kv_cache.shape[0], block_ids.numel()

    if rank % 2 == 0:
        # prefill rank: each layer's blocks, in the request's order, as one message per layer
        sends = [kv_cache[layer].index_select(1, block_ids) for layer in range(layers)]
        works = [dist.isend(blocks, rank + 1) for blocks in sends]
        for work in works:
            work.wait()
        return None

    # decode rank: land each layer in its own blocks as it arrives, then flag it
    bufs = [kv_cache.new_empty(2, n, *kv_cache.shape[3:]) for _ in range(layers)]
    works = [dist.irecv(buf, rank - 1) for buf in bufs]
    for layer in range(layers):
        works[layer].wait()
        kv_cache[layer].index_copy_(1, block_ids, bufs[layer])
        flags[layer:layer + 1].copy_(tag)       # layer complete: a consumer may read it now
    return None
