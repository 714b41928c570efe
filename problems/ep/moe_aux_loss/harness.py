import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, e, k = size["tokens"], size["experts"], size["topk"]
    # a per-rank preference for some experts: routing is imbalanced differently on every rank,
    # so the global loss differs clearly from any single rank's local loss
    bias = torch.randn(e, generator=gen, device=device, dtype=torch.float32)
    logits = torch.randn(t, e, generator=gen, device=device, dtype=torch.float32) + bias
    probs = torch.softmax(logits, dim=1)
    topk_ids = probs.topk(k, dim=1).indices.contiguous()
    return probs, topk_ids


def cost(size, world_size, dtype):
    t, e, k, w = size["tokens"], size["experts"], size["topk"], world_size
    return {
        "link_bytes": 2 * (w - 1) / w * 2 * e * 4,   # all-reduce of 2E floats
        "hbm_bytes": t * e * 4 + t * k * 8,
        "flops": t * e + t * k,
    }
