import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(lengths: torch.Tensor, values: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    local, rows, dim = tables.shape
    batch = lengths.numel() // (local * world)

    # input dist: the lengths (equal splits: each owner's features), then the values (uneven)
    recv_lengths = torch.empty_like(lengths)
    dist.all_to_all_single(recv_lengths, lengths)
    send_splits = lengths.view(world, local * batch).sum(dim=1).tolist()
    recv_splits = recv_lengths.view(world, local * batch).sum(dim=1).tolist()
    recv_values = values.new_empty(sum(recv_splits))
    dist.all_to_all_single(recv_values, values, recv_splits, send_splits)

    # sum pooling on the owner: one bag per (source rank, local feature, sample), each local
    # feature looking up its own table (the tables stacked into one)
    bag_table = torch.arange(local, device=values.device).repeat_interleave(batch).repeat(world)
    ids = recv_values + torch.repeat_interleave(bag_table * rows, recv_lengths)
    offsets = torch.cumsum(recv_lengths, dim=0) - recv_lengths
    pooled = F.embedding_bag(ids, tables.view(local * rows, dim), offsets, mode="sum")

    # output dist: each source rank's pooled rows back (equal splits), as [batch, features * dim]
    out = torch.empty_like(pooled)
    dist.all_to_all_single(out, pooled)
    return out.view(world * local, batch, dim).transpose(0, 1).reshape(batch, world * local * dim)
