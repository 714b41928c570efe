import torch
import torch.distributed as dist


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    world = dist.get_world_size()
    s_local, hq, dim = q.shape
    hq_local, hkv_local = hq // world, k.shape[1] // world
    per_rank = hq_local + 2 * hkv_local

    # one send buffer [W, S_local, Hq_local + 2 * Hkv_local, D]: block j holds rank j's q, k, v heads
    send = q.new_empty(world, s_local, per_rank, dim)
    send[:, :, :hq_local].copy_(q.view(s_local, world, hq_local, dim).transpose(0, 1))
    send[:, :, hq_local:hq_local + hkv_local].copy_(k.view(s_local, world, hkv_local, dim).transpose(0, 1))
    send[:, :, hq_local + hkv_local:].copy_(v.view(s_local, world, hkv_local, dim).transpose(0, 1))

    # a single all-to-all; blocks arrive in source-rank order = global token order
    recv = q.new_empty(world * s_local, per_rank, dim)
    dist.all_to_all_single(recv, send)
    return (recv[:, :hq_local], recv[:, hq_local:hq_local + hkv_local], recv[:, hq_local + hkv_local:])
