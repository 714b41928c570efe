import torch
import torch.distributed as dist

CHUNK = 64                                 # tokens per chunk of the chunkwise form


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_g: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    t, h, dk = q.shape
    dv = v.shape[-1]
    scale = dk ** -0.5
    n = t // CHUNK

    # 1) what the later ranks need from us, first, so that the exchange overlaps the local work:
    #    our final state from a zero start, sum_t exp(c_T - c_t) k_t^T v_t, and our total log decay
    c = log_g.cumsum(0)                                                     # [T, H] fp32
    total = c[-1]                                                           # [H]
    kf, vf = k.float(), v.float()
    state = torch.einsum("thk,thv->hkv", kf * torch.exp(total - c).unsqueeze(-1), vf)
    packed = torch.cat([state.reshape(-1), total])
    gathered = packed.new_empty(world * packed.numel())
    work = dist.all_gather_into_tensor(gathered, packed, async_op=True)

    # 2) our tokens from a zero start, chunkwise: exact within a chunk, chunk states between chunks
    qc = q.float().view(n, CHUNK, h, dk).permute(2, 0, 1, 3)               # [H, N, L, Dk]
    kc = kf.view(n, CHUNK, h, dk).permute(2, 0, 1, 3)
    vc = vf.view(n, CHUNK, h, dv).permute(2, 0, 1, 3)                       # [H, N, L, Dv]
    b = log_g.view(n, CHUNK, h).permute(2, 0, 1).cumsum(-1)                 # [H, N, L] log decay since chunk start
    causal = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril()
    decay = torch.exp((b.unsqueeze(-1) - b.unsqueeze(-2)).masked_fill(~causal, float("-inf")))
    out = (qc @ kc.transpose(-1, -2) * decay) @ vc                          # [H, N, L, Dv]
    chunk_states = (kc * torch.exp(b[..., -1:] - b).unsqueeze(-1)).transpose(-1, -2) @ vc   # [H, N, Dk, Dv]
    ends = b[..., -1].cumsum(-1)                                            # [H, N] log decay to each chunk's end
    # the state entering chunk j: sum over i < j of exp(ends[j-1] - ends[i]) chunk_states[i]
    before = torch.ones(n, n, dtype=torch.bool, device=q.device).tril(-1)
    starts = ends - b[..., -1]                                              # log decay to each chunk's start
    weights = torch.exp((starts.unsqueeze(-1) - ends.unsqueeze(-2)).masked_fill(~before, float("-inf")))
    entering = torch.einsum("hji,hikv->hjkv", weights, chunk_states)
    out += (qc * torch.exp(b).unsqueeze(-1)) @ entering

    # 3) the state entering our block: the earlier ranks' states, each decayed by the ranks between
    work.wait()
    gathered = gathered.view(world, -1)
    states = gathered[:, :-h].view(world, h, dk, dv)
    totals = gathered[:, -h:]
    incoming = torch.zeros_like(state)
    for src in range(rank):
        incoming = incoming * torch.exp(totals[src]).view(h, 1, 1) + states[src]
    out = out.permute(1, 2, 0, 3).reshape(t, h, dv)
    out += torch.einsum("thk,hkv->thv", q.float() * torch.exp(c).unsqueeze(-1), incoming)
    return (out * scale).to(q.dtype)
