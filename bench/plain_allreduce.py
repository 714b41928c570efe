"""An independent NCCL all_reduce loop, for checking the harness's timing against plain code.

    torchrun --standalone --nproc-per-node W bench/plain_allreduce.py [MiB per rank]

bf16, CUDA events, 20 calls per round over two buffers, 9 rounds, max over ranks, median; two
variants: in place (what nccl-tests measures) and clone-then-all_reduce (exactly the reference's
work, so the harness's number is comparable). Prints one JSON line (rank 0): time per call and
nccl-tests bus bandwidth (2(W-1)/W * bytes / t).
"""
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
    n = mib * (1 << 20) // 2
    bufs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    def inplace(b):
        dist.all_reduce(b)

    def like_reference(b):      # what problems/collective/all_reduce/reference.py does
        out = b.clone()
        dist.all_reduce(out)
        return out

    result = {"mib_per_rank": mib, "world_size": world}
    for name, fn in (("inplace", inplace), ("clone_then_all_reduce", like_reference)):
        for _ in range(5):
            fn(bufs[0])
        torch.cuda.synchronize()
        rounds, iters = [], 20
        for _ in range(9):
            dist.barrier()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for i in range(iters):
                fn(bufs[i % 2])
            torch.cuda.synchronize()
            e.record()
            e.synchronize()
            t = torch.tensor([s.elapsed_time(e) / 1000 / iters], device="cuda")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            rounds.append(t.item())
        t = statistics.median(rounds)
        result[name] = {"median_s": t, "busbw_GBps": 2 * (world - 1) / world * n * 2 / t / 1e9, "rounds_s": rounds}
    if rank == 0:
        print(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
