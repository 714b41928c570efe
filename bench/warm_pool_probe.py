"""Would a pool of ready processes take setup off an item's path? (issue 21)

    python bench/warm_pool_probe.py [--sets 1,4,8] [--repeat 2]

An item's setup is ~1.0 s: each of its three processes (checker, candidate, reference) makes a
CUDA context and then a W = 1 NCCL group, whose init loads NCCL's kernels (0.33-0.46 s). This
probe forks, from a parent that has imported torch but not touched CUDA (as the rank server
does), `sets` x 3 processes at once. Each makes its context and loads NCCL's kernels through a
throwaway W = 1 communicator, then says "warm". The batch's wall time (fork to the last "warm")
is what a pool refilled between jobs would cost. Then one set's three processes each make the
real W = 1 group and run one all_reduce, side by side, as a job would: "group" is what is left
of setup. "cold" is the same group without the throwaway one first. The GPU memory the batch
holds while idle is read with nvidia-smi. Prints a table last. A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pytest_kernelbench.protocol import MULTICAST_OFF  # noqa: E402


def child(preload: bool, go_r: int, out_w: int, store_dir: str, idx: int) -> None:
    import torch
    import torch.distributed as dist
    t0 = time.perf_counter()
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t_ctx = time.perf_counter()
    if preload:     # a throwaway communicator: NCCL loads its kernels into this context
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda", 0))
        dist.destroy_process_group()
    t_pre = time.perf_counter()
    os.write(out_w, (json.dumps({"idx": idx, "context": t_ctx - t0, "preload": t_pre - t_ctx}) + "\n").encode())
    if os.read(go_r, 1) != b"g":      # the parent's word: this process is one of the set that "runs a job"
        os._exit(0)
    t1 = time.perf_counter()
    store = dist.FileStore(os.path.join(store_dir, f"s{idx}"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0))
    t_group = time.perf_counter()
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    t_first = time.perf_counter()
    os.write(out_w, (json.dumps({"idx": idx, "group": t_group - t1, "first": t_first - t_group}) + "\n").encode())
    dist.destroy_process_group()
    os._exit(0)


def gpu_used_mib() -> float:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        return float(out.split()[0])
    except Exception:      # noqa: BLE001 - a probe: no figure rather than no table
        return float("nan")


def batch(sets: int, preload: bool) -> dict:
    n = 3 * sets
    base = gpu_used_mib()
    out_r, out_w = os.pipe()
    gos, pids = [], []
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        for i in range(n):
            go_r, go_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(out_r)
                os.close(go_w)
                try:
                    child(preload, go_r, out_w, d, i)
                finally:
                    os._exit(1)
            os.close(go_r)
            gos.append(go_w)
            pids.append(pid)
        f = os.fdopen(out_r)
        warm = [json.loads(f.readline()) for _ in range(n)]
        wall = time.perf_counter() - t0
        idle = gpu_used_mib() - base
        time.sleep(0.2)
        for i, w in enumerate(gos):     # one set runs its "job"; the others leave
            os.write(w, b"g" if i < 3 else b"x")
        job = [json.loads(f.readline()) for _ in range(3)]
        for pid in pids:
            os.waitpid(pid, 0)
    return {"sets": sets, "preload": preload, "batch_wall": wall,
            "context": statistics.median(r["context"] for r in warm), "context_max": max(r["context"] for r in warm),
            "preload_s": statistics.median(r["preload"] for r in warm), "idle_mib_per_proc": idle / n,
            "group": max(r["group"] for r in job), "first": max(r["first"] for r in job)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="1,4,8")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    os.environ.update({**MULTICAST_OFF})       # NVLink multicast stays off
    import torch  # noqa: F401 - imported before the forks, as the rank server does
    import torch.distributed  # noqa: F401
    rows = []
    for _ in range(args.repeat):
        rows.append(batch(1, False))
        for sets in map(int, args.sets.split(",")):
            rows.append(batch(sets, True))
            print(json.dumps(rows[-1]), flush=True)
    keys = ("batch_wall", "context", "context_max", "preload_s", "group", "first", "idle_mib_per_proc")
    print("\n| sets | NCCL preloaded | " + " | ".join(keys) + " |")
    print("|" + "---|" * (len(keys) + 2))
    for r in rows:
        print(f"| {r['sets']} | {'yes' if r['preload'] else 'no (cold)'} | " + " | ".join(f"{r[k]:.3f}" if k != 'idle_mib_per_proc' else f"{r[k]:.0f}" for k in keys) + " |")


if __name__ == "__main__":
    main()
