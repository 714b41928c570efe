import torch
import torch.distributed as dist


def _order_key(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    # int64 key, unique per (value, id): larger bfloat16 value first, then the lower id.
    # The sign-magnitude bits of a bfloat16 order it like its value (+0 and -0 tie).
    bits = values.to(torch.bfloat16).view(torch.int16).to(torch.int64)
    magnitude = bits & 0x7FFF
    key = torch.where(bits < 0, -magnitude, magnitude)
    return key * (1 << 32) - ids


def solution(logits: torch.Tensor, k: int):
    rank, world = dist.get_rank(), dist.get_world_size()
    num_tokens, vocab_local = logits.shape

    # local top-k candidates (ties broken by lowest id) and local softmax statistics
    local_ids = torch.arange(vocab_local, device=logits.device) + rank * vocab_local
    top_idx = _order_key(logits, local_ids).topk(k, dim=-1).indices
    top_vals = logits.gather(1, top_idx).float()
    local_max = top_vals[:, :1]
    local_sum = (logits.float() - local_max).exp().sum(dim=-1, keepdim=True)

    # one all-gather: [values | ids | max | sum-exp] per token (ids < 2^24 are exact in fp32)
    packed = torch.cat([top_vals, (top_idx + rank * vocab_local).float(), local_max, local_sum], dim=1)
    gathered = packed.new_empty(world * num_tokens, packed.shape[1])
    dist.all_gather_into_tensor(gathered, packed)
    gathered = gathered.view(world, num_tokens, -1).transpose(0, 1)   # [T, W, 2k+2]

    # global log-sum-exp from the per-rank (max, sum-exp) pairs
    maxes, sums = gathered[..., 2 * k], gathered[..., 2 * k + 1]
    global_max = maxes.max(dim=1, keepdim=True).values
    lse = global_max + (sums * (maxes - global_max).exp()).sum(dim=1, keepdim=True).log()

    # merge the W*k candidates
    cand_vals = gathered[..., :k].reshape(num_tokens, world * k)
    cand_ids = gathered[..., k:2 * k].reshape(num_tokens, world * k).long()
    best = _order_key(cand_vals, cand_ids).topk(k, dim=-1).indices
    return cand_vals.gather(1, best) - lse, cand_ids.gather(1, best)
