"""How often each CPU of this machine stops a busy thread, one CPU at a time (issue 21).

    python bench/cpu_jitter.py [--seconds S] [--out FILE.json]

A process pinned to each CPU in turn spins for S seconds (default 1) reading the clock and counts
the gaps between two reads longer than 20 us, 100 us and 1 ms, and the time they took from it.
/proc/stat's steal column for that CPU is read before and after. On a VM a gap is mostly the
hypervisor running something else on that vCPU; a launch-bound timed window loses exactly such
time (reports/baselines/2026-11-27-h100x1-fixedpart.md). A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from multiprocessing import Pipe, Process

THRESHOLDS_NS = (20_000, 100_000, 1_000_000)


def steal_ticks(cpu: int) -> int:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                return int(line.split()[8])
    return 0


def gaps(seconds: float, thresholds: tuple[int, ...] = THRESHOLDS_NS) -> tuple[list[int], int, int]:
    """Spin on the clock for `seconds`: per threshold, the gaps between two reads longer than it;
    the time lost in gaps over the first threshold; the longest gap (ns)."""
    clock = time.perf_counter_ns
    counts, lost, worst = [0] * len(thresholds), 0, 0
    end = clock() + int(seconds * 1e9)
    last = clock()
    while last < end:
        now = clock()
        gap = now - last
        if gap > thresholds[0]:
            lost += gap
            worst = max(worst, gap)
            for i, t in enumerate(thresholds):
                counts[i] += gap > t
        last = now
    return counts, lost, worst


def spin(cpu: int, seconds: float, conn) -> None:
    os.sched_setaffinity(0, {cpu})
    conn.send(gaps(seconds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    hz = os.sysconf("SC_CLK_TCK")
    for cpu in sorted(os.sched_getaffinity(0)):
        ours, theirs = Pipe()
        before = steal_ticks(cpu)
        p = Process(target=spin, args=(cpu, args.seconds, theirs))
        p.start()
        counts, lost, worst = ours.recv()
        p.join()
        rows.append({"cpu": cpu, "gaps_over_20us": counts[0], "gaps_over_100us": counts[1], "gaps_over_1ms": counts[2],
                     "lost_ms_per_s": lost / 1e6 / args.seconds, "worst_us": worst / 1e3,
                     "steal_ms_per_s": (steal_ticks(cpu) - before) * 1e3 / hz / args.seconds})
    print("| cpu | gaps > 20 us | > 100 us | > 1 ms | lost ms/s | worst us | steal ms/s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['cpu']} | {r['gaps_over_20us']} | {r['gaps_over_100us']} | {r['gaps_over_1ms']} | "
              f"{r['lost_ms_per_s']:.2f} | {r['worst_us']:.0f} | {r['steal_ms_per_s']:.1f} |")
    if args.out:
        with open(args.out, "w") as f:       # not a report: reports/baselines readers skip it by "what"
            json.dump({"what": "cpu_jitter", "seconds": args.seconds, "cpus": rows}, f, indent=1)


if __name__ == "__main__":
    main()
