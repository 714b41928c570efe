"""Host allocations per solver process: the device_to_host_fifo reference's call (a row sum and max
of a [262144, 256] float32 GPU tensor, 2 MiB copied to the host) in windows of 10 held outputs,
in fresh processes with glibc's default thresholds and with rank/hostmem.py's, alternately.

    python bench/host_alloc_probe.py [--procs 8] [--windows 40]

Prints each process's median ms per call and minor page faults per call, and the THP setting.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child(windows: int) -> None:
    sys.path.insert(0, str(REPO))
    from pytest_kernelbench.rank import hostmem
    steady = hostmem.steady()
    import torch
    x = torch.randn(262144, 256, device="cuda")
    per_call, faults = [], []
    for w in range(windows + 3):
        outs = []
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            outs.append(torch.stack((x.sum(1), x.amax(1)), 1).cpu())
        torch.cuda.synchronize()
        if w >= 3:
            per_call.append((time.perf_counter() - t0) / 10)
            faults.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 10)
        del outs
    q = statistics.quantiles(per_call, n=10)
    print(f"{'mallopt' if steady else 'default':8s} {statistics.median(per_call) * 1e3:7.3f} ms/call "
          f"p10-p90 {q[0] * 1e3:.3f}-{q[-1] * 1e3:.3f} "
          f"faults/call {statistics.median(faults):7.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--windows", type=int, default=40)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.windows)
        return
    try:
        print("THP:", Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip())
    except OSError:
        pass
    for k in range(args.procs):
        env = dict(os.environ, KB_DEV_MALLOC_DEFAULT="1" if k % 2 == 0 else "0")
        subprocess.run([sys.executable, __file__, "--child", "--windows", str(args.windows)], env=env, check=False)


if __name__ == "__main__":
    main()
