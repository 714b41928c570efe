"""What the forbidden-API guards cost a call that goes through them (why the reference process
installs none: rank/checker.py). One process, W = 1: torch.distributed.all_reduce on a small and a
1 MiB tensor, plain and with ForbidGuard(["collectives", "p2p"]) installed and active, as the
candidate process has it during a window.

    python bench/guard_cost.py [--calls 20000]        (NCCL on a GPU machine, else gloo)

A benchmark, not a test: prints one table.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def per_call_us(fn, calls: int, sync) -> float:
    best = float("inf")
    for _ in range(5):
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    dist.init_process_group("nccl" if cuda else "gloo", store=store, rank=0, world_size=1,
                            **({"device_id": device} if cuda else {}))
    tensors = {"4 B": torch.zeros(1, device=device), "1 MiB": torch.zeros(1 << 18, device=device)}
    plain = {k: per_call_us(lambda t=t: dist.all_reduce(t), args.calls, sync) for k, t in tensors.items()}
    from pytest_kernelbench.rank.guards import ForbidGuard
    guard = ForbidGuard(["collectives", "p2p"])
    guard.install()
    guard.active = True
    guarded = {k: per_call_us(lambda t=t: dist.all_reduce(t), args.calls, sync) for k, t in tensors.items()}
    print(f"\nbackend {dist.get_backend()}, {torch.cuda.get_device_name(0) if cuda else 'CPU'}, torch {torch.__version__}")
    print("| all_reduce of | plain us a call | guarded us a call | the guards' cost us | share |")
    print("|---|---|---|---|---|")
    for k in tensors:
        d = guarded[k] - plain[k]
        print(f"| {k} | {plain[k]:.2f} | {guarded[k]:.2f} | {d:+.2f} | {d / plain[k]:+.1%} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
