"""Where a job's time goes outside its sizes, from the marks of KB_DEV_MARKS (pytest_kernelbench/procs.py: mark).

    KB_DEV_MARKS=/tmp/m pytest ... --kb-keep-jobs --kb-jobs-dir=J problems/...
    python bench/job_timeline.py /tmp/m [J]        (J: job folders whose logs hold the sandboxed marks)

Prints each job's marks relative to its launch, then the median gap before each mark over the jobs.
"""
from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"KBMARK (\d+) ([\d.]+) (.*)")


def read(folders: list[Path]) -> list[tuple[float, int, str]]:
    marks = []
    for folder in folders:
        for p in list(folder.rglob("*.marks")) + list(folder.rglob("*.log")):
            for line in p.read_text(errors="replace").splitlines():
                m = LINE.search(line)
                if m:
                    marks.append((float(m.group(2)), int(m.group(1)), m.group(3)))
    return sorted(marks)


def jobs(marks: list[tuple[float, int, str]]) -> list[list[tuple[float, int, str]]]:
    out, cur = [], None
    for t, pid, what in marks:
        if what == "launch: start":
            cur = [(t, pid, what)]
            out.append(cur)
        elif cur is not None:
            cur.append((t, pid, what))
    return out


def main() -> None:
    folders = [Path(a) for a in sys.argv[1:]]
    gaps: dict[str, list[float]] = defaultdict(list)
    for job in jobs(read(folders)):
        t0, prev = job[0][0], job[0][0]
        print("---")
        for t, pid, what in job:
            label = re.sub(r"size \S+ done", "size done", what)
            print(f"{t - t0:8.3f} {t - prev:+7.3f}  {pid:>7}  {what}")
            gaps[label].append(t - prev)
            prev = t
    print("\n| mark | jobs | median gap before it, s |\n|---|---|---|")
    for label, xs in gaps.items():
        print(f"| {label} | {len(xs)} | {statistics.median(xs):.3f} |")


if __name__ == "__main__":
    main()
