"""Distributed 2-D FFT with the row transforms overlapped with the transpose.

The rank's rows are split into C chunks. Chunk k is transformed along x and packed by
destination straight away, and its all-to-all is issued (async) while chunk k+1 is
transformed, so the exchange starts as soon as the first chunk is ready instead of after
the whole slab. The received blocks arrive as [chunk, source, rows of the chunk, columns];
one copy puts them in global row order ([source, chunk, rows]) for the column transforms.
Small fields (the latency regime) use two chunks at most.
"""
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    rows, nx = x.shape
    cb = nx // world
    # 4 chunks for large slabs; small ones (the latency regime) 2 at most, so that tiny takes
    # the chunked path on CPU too
    nchunks = min(4 if rows * nx >= (1 << 16) else 2, rows)
    while rows % nchunks:
        nchunks -= 1
    rc = rows // nchunks
    recv = x.new_empty(nchunks, world, rc, cb)
    works = []
    for k in range(nchunks):
        a = torch.fft.fft(x[k * rc:(k + 1) * rc], dim=1, norm="ortho")
        send = a.view(rc, world, cb).transpose(0, 1).contiguous()
        works.append(dist.all_to_all_single(torch.view_as_real(recv[k]), torch.view_as_real(send), async_op=True))
    for w in works:
        w.wait()
    cols = recv.transpose(0, 1).reshape(world * rows, cb)       # global row order: [source, chunk, row]
    return torch.fft.fft(cols, dim=0, norm="ortho").contiguous()
