"""Where a W = 1 process's setup goes on a GPU (issue 21: setup is ~1.0 s of an item's ~3 s cost).

    python bench/nccl_init_probe.py [--procs 1,3] [--variants base,NAME=VALUE;NAME=VALUE,...]

Starts `procs` fresh processes at once (a job's checker, candidate and reference processes make
their contexts and W = 1 NCCL groups side by side on one GPU), each timing: the CUDA context,
init_process_group with device_id (the eager communicator), the first all_reduce. Each variant runs with its environment knobs; NCCL's own breakdown of the communicator's
init ("Init timings", NCCL_DEBUG=INFO) is printed for the first process. Prints a table last.
A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pytest_kernelbench.protocol import MULTICAST_OFF  # noqa: E402

CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
import torch
t_import = time.perf_counter()
torch.cuda.set_device(0); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t_ctx = time.perf_counter()
import torch.distributed as dist
store = dist.FileStore(sys.argv[1], 1)
kw = {} if os.environ.get("KB_PROBE_LAZY") else {"device_id": torch.device("cuda", 0)}
dist.init_process_group("nccl", store=store, rank=0, world_size=1, **kw)
t_group = time.perf_counter()
x = torch.ones(1 << 20, device="cuda"); dist.all_reduce(x); torch.cuda.synchronize()
t_first = time.perf_counter()
print("KBPROBE " + json.dumps({"import": t_import - t0, "context": t_ctx - t_import, "group": t_group - t_ctx,
                               "first": t_first - t_group, "total": t_first - t0}))
dist.destroy_process_group()
"""

TIMINGS = re.compile(r"Init timings.*")


def one(procs: int, env: dict) -> tuple[list[dict], str]:
    with tempfile.TemporaryDirectory() as d:
        # NVLink multicast stays off whatever the variant says
        e = {**os.environ, **env, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT", **MULTICAST_OFF}
        ps = [subprocess.Popen([sys.executable, "-c", CHILD, os.path.join(d, f"store{i}")], env=e,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(procs)]
        outs = [p.communicate()[0] for p in ps]
    rows = [json.loads(line.split("KBPROBE ", 1)[1]) for o in outs for line in o.splitlines() if "KBPROBE " in line]
    m = TIMINGS.search(outs[0])
    return rows, (m.group(0) if m else "(no Init timings line)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", default="1,3")
    ap.add_argument("--variants", default="base")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    table = []
    for variant in args.variants.split(","):
        env = {} if variant == "base" else dict(kv.split("=", 1) for kv in variant.split(";"))
        for procs in map(int, args.procs.split(",")):
            rows = []
            for _ in range(args.repeat):
                got, timings = one(procs, env)
                rows += got
                print(f"{variant} x{procs}: {timings}")
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]} if rows else {}
            table.append((variant, procs, len(rows), med))
    keys = ("import", "context", "group", "first", "total")
    print("\n| variant | procs | runs | " + " | ".join(f"{k} s" for k in keys) + " |")
    print("|" + "---|" * (len(keys) + 3))
    for variant, procs, n, med in table:
        print(f"| {variant} | {procs} | {n} | " + " | ".join(f"{med.get(k, float('nan')):.3f}" for k in keys) + " |")


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t:.0f} s)")
