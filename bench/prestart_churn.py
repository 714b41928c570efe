"""The next job's setup made while this one is timed: does it disturb the timed windows? (issue 21)

    python bench/prestart_churn.py [--period 4.5] [--keep 2]     (runs until SIGTERM or SIGINT)

An item's ~1.0 s setup (three processes' CUDA contexts and W = 1 NCCL groups) is a floor within
the item (bench/nccl_init_probe.py, bench/warm_pool_probe.py). It would leave an item's path if
the next item's processes were set up while this item runs, idle until their turn. Before
building that, this stands in for it beside a self-check: every `period` seconds (about one item)
it forks, from a parent that imported torch as the rank server does, three processes that each
make a CUDA context and a W = 1 NCCL group and then sleep; it keeps the newest `keep` trios and
kills older ones (a conservative stand-in: the real design would end a job's processes outside
any timed window). Each trio's setup time goes to stdout. A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pytest_kernelbench.protocol import MULTICAST_OFF  # noqa: E402


def member(store_path: str) -> None:
    import torch
    import torch.distributed as dist
    t0 = time.perf_counter()
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t_ctx = time.perf_counter()
    dist.init_process_group("nccl", store=dist.FileStore(store_path, 1), rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    print(f"member {os.getpid()}: context {t_ctx - t0:.3f} s, group {time.perf_counter() - t_ctx:.3f} s", flush=True)
    while True:
        time.sleep(3600)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--period", type=float, default=4.5)
    ap.add_argument("--keep", type=int, default=2)
    args = ap.parse_args()
    os.environ.update(MULTICAST_OFF)        # NVLink multicast stays off
    import torch  # noqa: F401 - before the forks, as the rank server
    import torch.distributed  # noqa: F401
    trios: list[list[int]] = []
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    with tempfile.TemporaryDirectory() as d:
        n = 0
        while not stop:
            n += 1
            pids = []
            for k in range(3):
                pid = os.fork()
                if pid == 0:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    try:
                        member(os.path.join(d, f"s{n}-{k}"))
                    finally:
                        os._exit(1)
                pids.append(pid)
            trios.append(pids)
            while len(trios) > args.keep:
                for pid in trios.pop(0):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            end = time.monotonic() + args.period
            while not stop and time.monotonic() < end:
                time.sleep(0.05)
        for pids in trios:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    print(f"trios started: {n}", flush=True)


if __name__ == "__main__":
    main()
