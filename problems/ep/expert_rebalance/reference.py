import torch
import torch.distributed as dist


def solution(weights: torch.Tensor, old_placement: torch.Tensor, new_placement: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    slots_per_rank = weights.shape[0]
    num_slots = old_placement.numel()
    device = weights.device

    # where each expert sits now, and for every new slot the old slot that holds its expert
    slot_of_expert = torch.empty_like(old_placement)
    slot_of_expert[old_placement] = torch.arange(num_slots, device=device)
    src_slot = slot_of_expert[new_placement]
    src_rank = src_slot // slots_per_rank
    dst_rank = torch.arange(num_slots, device=device) // slots_per_rank

    # send: the experts this rank holds, in new-slot order (so grouped by destination rank)
    mine = src_rank == rank
    send_rows = src_slot[mine] - rank * slots_per_rank
    send_counts = torch.bincount(dst_rank[mine], minlength=world)

    # receive: this rank's new slots grouped by source rank, in slot order within a source
    my_src = src_rank[rank * slots_per_rank:(rank + 1) * slots_per_rank]
    recv_order = torch.argsort(my_src, stable=True)
    recv_counts = torch.bincount(my_src, minlength=world)

    send_buf = weights.index_select(0, send_rows)
    recv_buf = torch.empty_like(weights)
    dist.all_to_all_single(recv_buf, send_buf, recv_counts.tolist(), send_counts.tolist())
    out = torch.empty_like(weights)
    out.index_copy_(0, recv_order, recv_buf)
    return out
