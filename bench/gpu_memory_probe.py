"""GPU memory of each process of a job while a run goes (issue 21: an item of the W = 1 self-check
ran out of memory on an 80 GiB H100, its checker holding 55 GiB).

    python bench/gpu_memory_probe.py --out FILE.json -- PYTEST ARGS...

Samples nvidia-smi's per-process memory every 0.2 s beside the run and names each process by its
place in the job: a checker is the parent of GPU processes; its first child is the candidate
process, its second the reference process. Prints, per job (checker), each role's peak and the
checker's memory over time (one sample a second). A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def gpu_processes() -> dict[int, int]:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and mib.strip().isdigit():
            found[int(pid)] = int(mib)
    return found


def parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--every", type=float, default=0.2)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = [a for a in args.cmd if a != "--"]
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *cmd])
    t0, samples, parents = time.monotonic(), [], {}
    while proc.poll() is None:
        mem = gpu_processes()
        for pid in mem:
            parents.setdefault(pid, parent(pid))
        samples.append((round(time.monotonic() - t0, 2), mem))
        time.sleep(args.every)
    jobs: dict[int, dict] = {}
    children: dict[int, list[int]] = {}
    for pid, pp in parents.items():
        if pp in parents:
            children.setdefault(pp, []).append(pid)
    for checker, kids in children.items():
        kids = sorted(kids)
        roles = {checker: "checker", **{k: r for k, r in zip(kids, ("candidate", "reference"))}}
        peak = {r: max((m.get(p, 0) for _, m in samples), default=0) for p, r in roles.items()}
        seen = [(t, m.get(checker)) for t, m in samples if checker in m]
        jobs[checker] = {"pids": {r: p for p, r in roles.items()}, "peak_mib": peak,
                         "checker_mib": [(t, mib) for k, (t, mib) in enumerate(seen) if k % max(1, int(1 / args.every)) == 0]}
    Path(args.out).write_text(json.dumps({"samples": len(samples), "jobs": jobs}))
    for checker, j in sorted(jobs.items()):
        print(f"job {checker}: peak MiB " + ", ".join(f"{r} {v}" for r, v in j["peak_mib"].items()))
        print("   checker MiB over time: " + " ".join(f"{t:.0f}s:{mib}" for t, mib in j["checker_mib"]))
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
