"""What the forbidden-API guards cost a call that goes through them (why the reference process
installs none: rank/checker.py). One process, W = 1: torch.distributed.all_reduce on a small and a
1 MiB tensor, in blocks of calls that alternate between the plain functions and methods and the
guarded ones (ForbidGuard(["collectives", "p2p"]) installed and active, as the candidate process
has it during a window), so that drift and warm-up hit both alike; the median block of each.

    python bench/guard_cost.py [--calls 2000] [--blocks 30]   (NCCL on a GPU machine, else gloo)

A benchmark, not a test: prints one table.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def attributes(dist, pg_classes) -> dict:
    """Every attribute the guard may replace: (owner, name) -> what is there now."""
    import torch.distributed.distributed_c10d as c10d
    from pytest_kernelbench.rank.guards import COLLECTIVE_FUNCS, P2P_FUNCS, PG_COLLECTIVES, PG_P2P
    found = {}
    for module in (dist, c10d):
        for name in (*COLLECTIVE_FUNCS, *P2P_FUNCS):
            if hasattr(module, name):
                found[(module, name)] = getattr(module, name)
    for cls in pg_classes:
        for name in (*PG_COLLECTIVES, *PG_P2P):
            if name in cls.__dict__:
                found[(cls, name)] = cls.__dict__[name]
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=30)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import Backend, ProcessGroup
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    dist.init_process_group("nccl" if cuda else "gloo", store=store, rank=0, world_size=1,
                            **({"device_id": device} if cuda else {}))
    from pytest_kernelbench.rank.guards import ForbidGuard, group_classes
    classes = group_classes(ProcessGroup, Backend)
    plain = attributes(dist, classes)
    guard = ForbidGuard(["collectives", "p2p"])
    guard.install()
    guard.active = True
    guarded = attributes(dist, classes)
    states = {"plain": plain, "guarded": guarded}
    tensors = {"4 B": torch.zeros(1, device=device), "1 MiB": torch.zeros(1 << 18, device=device)}
    times: dict = {(k, s): [] for k in tensors for s in states}
    for block in range(args.blocks):
        for k, t in tensors.items():
            for s in (("plain", "guarded") if block % 2 == 0 else ("guarded", "plain")):
                for (owner, name), value in states[s].items():
                    setattr(owner, name, value)
                sync()
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    dist.all_reduce(t)
                sync()
                times[(k, s)].append((time.perf_counter() - t0) / args.calls * 1e6)
    print(f"\nbackend {dist.get_backend()}, {torch.cuda.get_device_name(0) if cuda else 'CPU'}, torch {torch.__version__}, "
          f"{args.blocks} blocks of {args.calls} calls each way, alternating")
    print("| all_reduce of | plain us a call | guarded us a call | the guards' cost us | share |")
    print("|---|---|---|---|---|")
    for k in tensors:
        p, g = statistics.median(times[(k, "plain")]), statistics.median(times[(k, "guarded")])
        print(f"| {k} | {p:.2f} | {g:.2f} | {g - p:+.2f} | {(g - p) / p:+.1%} |")
    for (owner, name), value in plain.items():
        setattr(owner, name, value)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
