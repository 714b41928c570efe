import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, s, h = size["max_tokens"], size["max_seqs"], size["hidden"]
    # data-dependent sizes: valid tokens in [1, T], sequences in [1, S], residual present or not
    counts = torch.cat([
        torch.randint(1, t + 1, (1,), generator=gen, device=device),
        torch.randint(1, s + 1, (1,), generator=gen, device=device),
        torch.randint(0, 2, (1,), generator=gen, device=device),
    ])
    hidden = torch.randn(t, h, generator=gen, device=device, dtype=dtype)
    residual = torch.randn(t, h, generator=gen, device=device, dtype=dtype)
    positions = torch.randint(0, 131072, (t,), generator=gen, device=device, dtype=torch.int64)
    seq_lens = torch.randint(1, 32768, (s,), generator=gen, device=device, dtype=torch.int32)
    return counts, hidden, residual, positions, seq_lens


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    t, s, h = size["max_tokens"], size["max_seqs"], size["hidden"]
    # expected payload: (T+1)/2 tokens of hidden_states + positions, residual half of the time,
    # (S+1)/2 sequence lengths, plus a small header
    tok = (t + 1) / 2
    payload = tok * h * e * 1.5 + tok * 8 + (s + 1) / 2 * 4 + 4 * 7 * 8
    return {
        "link_bytes": payload,
        "hbm_bytes": 2 * payload,        # read the valid prefixes, write the received tensors
        "flops": 0,
    }
