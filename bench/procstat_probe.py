"""What the kernel says about each job's two solver processes, sampled from outside while a run
goes (issue 21: the reference process often issues the same calls slower than its twin).

    python bench/procstat_probe.py JOBS_DIR OUT.jsonl      (until killed; run beside the plugin)
    python bench/procstat_probe.py --join OUT.jsonl REPORT.json

Every 0.25 s it looks for new jobs (JOBS_DIR/*/hb/pids0: checker, candidate, reference) and reads
/proc of their solver processes: context switches, page faults, CPU time, transparent huge pages,
and each thread's name, CPU time and last CPU. A process's last sample is written when it is gone.
--join prints, per item, how much slower the reference process issued its calls than the candidate
process (the median over sizes of the windows' "calls" part) beside the two processes' figures.
A benchmark's probe, not a test; it reads /proc of processes of the same machine only.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROLES = ("checker", "candidate", "reference")


def _fields(path: str) -> dict[str, str]:
    out = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k.strip()] = v.strip()
    except OSError:
        pass
    return out


def _stat(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def sample(pid: int) -> dict | None:
    st = _stat(f"/proc/{pid}/stat")
    if not st or st[0] in ("Z", "X"):
        return None
    status = _fields(f"/proc/{pid}/status")
    rollup = _fields(f"/proc/{pid}/smaps_rollup")
    threads = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        ts = _stat(f"{task}/stat")
        if ts:
            try:
                comm = (task / "comm").read_text().strip()
            except OSError:
                comm = "?"
            tstatus = _fields(f"{task}/status")
            threads.append({"tid": int(task.name), "comm": comm, "cpu_ticks": int(ts[11]) + int(ts[12]),
                            "last_cpu": int(ts[36]), "nonvol": int(tstatus.get("nonvoluntary_ctxt_switches", 0)),
                            "vol": int(tstatus.get("voluntary_ctxt_switches", 0))})
    return {"minflt": int(st[7]), "majflt": int(st[9]), "utime": int(st[11]), "stime": int(st[12]),
            "vol": int(status.get("voluntary_ctxt_switches", 0)), "nonvol": int(status.get("nonvoluntary_ctxt_switches", 0)),
            "rss_kb": int(status.get("VmRSS", "0 kB").split()[0]),
            "anon_huge_kb": int(rollup.get("AnonHugePages", "0 kB").split()[0]), "threads": threads}


def watch(jobs: Path, out: Path) -> None:
    live: dict[int, dict] = {}          # pid -> {"job", "role", "last"}
    seen: set[Path] = set()
    with out.open("a") as f:
        while True:
            for pids in jobs.glob("*/hb/pids0"):
                if pids in seen:
                    continue
                try:
                    numbers = [int(x) for x in pids.read_text().split()]
                except (OSError, ValueError):
                    continue
                seen.add(pids)
                for role, pid in zip(ROLES, numbers):
                    if pid > 0 and role != "checker":
                        live[pid] = {"job": pids.parent.parent.name, "role": role, "last": None}
            for pid, rec in list(live.items()):
                now = sample(pid)
                if now is None:
                    if rec["last"] is not None:
                        f.write(json.dumps({"job": rec["job"], "role": rec["role"], "pid": pid, **rec["last"]}) + "\n")
                        f.flush()
                    del live[pid]
                else:
                    rec["last"] = now
            time.sleep(0.25)


def join(samples: Path, report: Path) -> None:
    by_job: dict[str, dict[str, dict]] = {}
    for line in samples.read_text().splitlines():
        r = json.loads(line)
        by_job.setdefault(r["job"], {})[r["role"]] = r
    doc = json.loads(report.read_text())
    print("| item | reference / candidate calls time | involuntary switches | minor faults | CPU ticks | "
          "huge pages kB | busiest other thread (ticks) |")
    print("|---|---|---|---|---|---|---|")
    print("| | | reference / candidate | the same | the same | the same | the same |")
    for it in sorted(doc["items"], key=lambda i: i["problem"]):
        slug = it["problem"].replace("/", "-").replace("_", "-")
        jobs = [j for j in by_job if j.startswith(slug)]
        ratios = [s["timing"]["window_us"]["reference"]["calls"] / s["timing"]["window_us"]["candidate"]["calls"]
                  for s in it.get("sizes", []) if (s.get("timing") or {}).get("window_us", {}).get("candidate")]
        if not jobs or not ratios:
            continue
        roles = by_job[jobs[0]]
        row = []
        for key in ("nonvol", "minflt"):
            row.append(" / ".join(str(roles.get(r, {}).get(key, "-")) for r in ("reference", "candidate")))
        row.append(" / ".join(str(roles.get(r, {}).get("utime", 0) + roles.get(r, {}).get("stime", 0))
                              for r in ("reference", "candidate")))
        row.append(" / ".join(str(roles.get(r, {}).get("anon_huge_kb", "-")) for r in ("reference", "candidate")))
        busy = []
        for r in ("reference", "candidate"):
            others = sorted((t for t in roles.get(r, {}).get("threads", []) if t["tid"] != roles[r]["pid"]),
                            key=lambda t: -t["cpu_ticks"]) if r in roles else []
            busy.append(f"{others[0]['comm']} {others[0]['cpu_ticks']}" if others else "-")
        print(f"| {it['problem']} | {statistics.median(ratios):.3f} | " + " | ".join(row)
              + f" | {' / '.join(busy)} |")


if __name__ == "__main__":
    if sys.argv[1] == "--join":
        join(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        watch(Path(sys.argv[1]), Path(sys.argv[2]))
