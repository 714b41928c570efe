"""Does a vCPU that is quiet now stay quiet for the next item? (issue 21)

    python bench/cpu_persistence.py [--interval 0.5] [--intervals 40] [--cpus all|N]

One process pinned to each CPU spins, all at once, for `intervals` intervals of `interval`
seconds, and counts per interval the time it lost in gaps over 20 us and its gaps over 1 ms
(bench/cpu_jitter.py measures one CPU at a time). A launch-bound timed window loses what its
solver process's vCPU loses, and the rounds an item needs follow such stalls. If the quietest
vCPUs of one interval stay quietest over the next seconds, a job could pin its processes to the
vCPUs a short probe finds quietest at its start instead of to fixed ones. The table compares the
loss, `ahead` intervals later, of the two vCPUs quietest now, the two fixed ones at the top (what
rank/cores.py takes for rank 0) and the median vCPU. A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from multiprocessing import Pipe, Process
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_jitter import gaps  # noqa: E402

GAP_NS, STALL_NS = 20_000, 1_000_000


def spin(cpu: int, interval: float, intervals: int, start: float, conn) -> None:
    os.sched_setaffinity(0, {cpu})
    while time.time() < start:
        pass
    out = []
    for _ in range(intervals):
        (_, stalls), lost, _ = gaps(interval, (GAP_NS, STALL_NS))
        out.append((lost / 1e6 / interval, stalls))
    conn.send(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--intervals", type=int, default=40)
    ap.add_argument("--cpus", default="all", help="all, or the N highest-numbered CPUs")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if args.cpus != "all":
        cpus = cpus[-int(args.cpus):]
    start = time.time() + 1.0
    procs = []
    for cpu in cpus:
        ours, theirs = Pipe()
        p = Process(target=spin, args=(cpu, args.interval, args.intervals, start, theirs))
        p.start()
        procs.append((cpu, ours, p))
    loss = {cpu: conn.recv() for cpu, conn, _ in procs}
    for _, _, p in procs:
        p.join()
    n = args.intervals
    print("lost ms/s per interval (rows: cpu):")
    for cpu in cpus:
        print(f"cpu {cpu:2d}: " + " ".join(f"{loss[cpu][t][0]:5.1f}" for t in range(n)))
    print("\n| ahead (intervals) | s | quietest 2 now: lost ms/s later | fixed top 2 | median cpu | stalls > 1 ms a s: quietest 2 | fixed top 2 |")
    print("|---|---|---|---|---|---|---|")
    top2 = cpus[-2:]
    for ahead in (1, 2, 5, 10, 20):
        q, fx, med, qs, fs = [], [], [], [], []
        for t in range(n - ahead):
            now = sorted(cpus, key=lambda c: loss[c][t][0])[:2]
            later = t + ahead
            q.append(statistics.mean(loss[c][later][0] for c in now))
            fx.append(statistics.mean(loss[c][later][0] for c in top2))
            med.append(statistics.median(loss[c][later][0] for c in cpus))
            qs.append(statistics.mean(loss[c][later][1] for c in now) / args.interval)
            fs.append(statistics.mean(loss[c][later][1] for c in top2) / args.interval)
        if q:
            print(f"| {ahead} | {ahead * args.interval:.1f} | {statistics.mean(q):.2f} | {statistics.mean(fx):.2f} | "
                  f"{statistics.mean(med):.2f} | {statistics.mean(qs):.2f} | {statistics.mean(fs):.2f} |")


if __name__ == "__main__":
    main()
