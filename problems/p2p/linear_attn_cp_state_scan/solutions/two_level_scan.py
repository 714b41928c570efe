"""Gated linear attention under context parallelism with a two-level chunk scan and one correction.

The reference spends most of its work in two places a kernel developer removes:
  - the state entering each of the N chunks is a dense [N, N] decayed sum of all earlier chunk
    states (N^2 Dk Dv per head: at N = 256 chunks more than all its other products together);
    here chunks form groups of G (up to 16): a dense [G, G] sum inside each group and a dense
    [N/G, N/G] one over the group states, N (G + N/G^2) Dk Dv instead of N^2 Dk Dv;
  - the state entering the rank's block is applied to every token in a second [T, Dk] x [Dk, Dv]
    pass after the chunk one; here it is folded into the groups' entering states first, so every
    token meets one entering state, in one product.
And the block's own final state (what the later ranks need) comes from the chunk states, which
the chunkwise form computes anyway, instead of a separate pass over every token. Its all-gather
(the states and total decays, fp32) starts right after and runs during the within-chunk
products; only the folding of the earlier ranks' states and the one product wait for it.
Every sum is fp32; every exponent is a log decay over a span of tokens, so <= 0.
"""
import torch
import torch.distributed as dist

CHUNK = 64                                 # tokens per chunk
GROUP = 16                                 # most chunks per group of the two-level scan


def _prefix(states, decays):
    """states [H, M, G, Dk, Dv] (each from a zero start, decayed to its own end) and decays [H, M, G]
    (log decay across each): the exclusive prefix entering each [H, M, G, Dk, Dv], and each run of G
    as a whole: its state [H, M, Dk, Dv] and log decay [H, M]."""
    g = decays.shape[-1]
    ends = decays.cumsum(-1)                                                # log decay to each one's end
    starts = ends - decays
    before = torch.ones(g, g, dtype=torch.bool, device=decays.device).tril(-1)
    weights = torch.exp((starts.unsqueeze(-1) - ends.unsqueeze(-2)).masked_fill(~before, float("-inf")))
    entering = torch.einsum("hmji,hmikv->hmjkv", weights, states)
    total = ends[..., -1]
    whole = torch.einsum("hmi,hmikv->hmkv", torch.exp(total.unsqueeze(-1) - ends), states)
    return entering, whole, total


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_g: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    t, h, dk = q.shape
    dv = v.shape[-1]
    n = t // CHUNK
    grp = max(g for g in range(1, GROUP + 1) if n % g == 0)
    m = n // grp

    # 1) chunk states, group states, the block's state: each from a zero start
    kc = k.float().view(n, CHUNK, h, dk).permute(2, 0, 1, 3)               # [H, N, L, Dk]
    vc = v.float().view(n, CHUNK, h, dv).permute(2, 0, 1, 3)               # [H, N, L, Dv]
    b = log_g.view(n, CHUNK, h).permute(2, 0, 1).cumsum(-1)                 # [H, N, L] log decay since chunk start
    a = b[..., -1]                                                          # [H, N] log decay across each chunk
    chunk_states = (kc * torch.exp(a.unsqueeze(-1) - b).unsqueeze(-1)).transpose(-1, -2) @ vc   # [H, N, Dk, Dv]
    within, group_states, group_decay = _prefix(chunk_states.view(h, m, grp, dk, dv), a.view(h, m, grp))
    group_entering, state, total = _prefix(group_states.unsqueeze(1), group_decay.unsqueeze(1))
    packed = torch.cat([state.reshape(-1), total.reshape(-1)])
    gathered = packed.new_empty(world * packed.numel())
    work = dist.all_gather_into_tensor(gathered, packed, async_op=True)

    # 2) within chunks: exact attention-like products, decayed between the two tokens
    qc = q.float().view(n, CHUNK, h, dk).permute(2, 0, 1, 3)               # [H, N, L, Dk]
    causal = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril()
    decay = torch.exp((b.unsqueeze(-1) - b.unsqueeze(-2)).masked_fill(~causal, float("-inf")))
    out = (qc @ kc.transpose(-1, -2) * decay) @ vc                          # [H, N, L, Dv]

    # 3) the state entering our block: the earlier ranks' states, each decayed by the ranks between
    work.wait()
    gathered = gathered.view(world, -1)
    incoming = torch.zeros(h, dk, dv, dtype=torch.float32, device=q.device)
    if rank:
        states, totals = gathered[:rank, :-h].view(rank, h, dk, dv), gathered[:rank, -h:]
        between = totals.cumsum(0)
        incoming = torch.einsum("rh,rhkv->hkv", torch.exp(between[-1] - between), states)

    # 4) the state entering each chunk: incoming, then the earlier groups, then its group's earlier chunks
    group_in = group_entering.view(h, m, dk, dv) + \
        torch.exp(group_decay.cumsum(-1) - group_decay).view(h, m, 1, 1) * incoming.unsqueeze(1)
    a = a.view(h, m, grp)
    entering = within + torch.exp(a.cumsum(-1) - a).view(h, m, grp, 1, 1) * group_in.unsqueeze(2)
    out += (qc * torch.exp(b).unsqueeze(-1)) @ entering.view(h, n, dk, dv)
    return (out.permute(1, 2, 0, 3).reshape(t, h, dv) * dk ** -0.5).to(q.dtype)
