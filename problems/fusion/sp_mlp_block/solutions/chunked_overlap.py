"""Sequence-parallel MLP with both ends overlapped, NCCL collectives only.

The m tokens of every rank are split into C chunks of rows. Chunk j's pipeline is
all-gather(chunk j of every rank) -> gate/up GEMM -> SiLU*mul -> down GEMM ->
reduce-scatter(chunk j's rows of every rank's block). All-gathers are issued ahead
(async), so the gather of chunk j+1 and the reduce-scatter of chunk j-1 are in flight
(on the communicator's stream) while chunk j's GEMMs run on the compute stream.
The gathered rows of chunk j come grouped by source rank ([W, c, h]), which is also the
row order the reduce-scatter wants ([W, c, h] -> this rank's [c, h]), so no permutation
copy is needed. Decode sizes (m < 8 tokens) use one chunk: nothing to overlap there.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

def _chunks(m: int) -> list[tuple[int, int]]:
    # decode (m < 8): one chunk; else 2 to 4 chunks of >= 256 tokens (tiny's m = 8 takes the
    # chunked path too, so the CPU self-check runs it)
    n = 1 if m < 8 else min(4, max(2, m // 256))
    step = -(-m // n)
    return [(lo, min(m, lo + step)) for lo in range(0, m, step)]


def solution(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    m, h = x.shape
    f = w_down.shape[0]
    out = torch.empty_like(x)
    spans = _chunks(m)
    gathered, gathers = [], []
    for lo, hi in spans:          # issue every gather now: they queue on the communicator in order
        buf = x.new_empty(world * (hi - lo), h)
        gathered.append(buf)
        gathers.append(dist.all_gather_into_tensor(buf, x[lo:hi].contiguous(), async_op=True))
    scatters = []
    for (lo, hi), buf, work in zip(spans, gathered, gathers):
        work.wait()
        gate_up = torch.matmul(buf, w_gate_up)
        act = F.silu(gate_up[:, :f]).mul_(gate_up[:, f:])
        partial = torch.matmul(act, w_down)          # rows: [source rank, token of the chunk]
        if len(spans) == 1:
            scatters.append(dist.reduce_scatter_tensor(out, partial, async_op=True))
        else:
            piece = x.new_empty(hi - lo, h)
            scatters.append((dist.reduce_scatter_tensor(piece, partial, async_op=True), lo, hi, piece))
    if len(spans) == 1:
        scatters[0].wait()
        return out
    for work, lo, hi, piece in scatters:
        work.wait()
        out[lo:hi].copy_(piece)
    return out
