"""The harness's own cost per item, by phase, for each way of starting ranks (issue 16).

    python bench/harness_overhead.py [--out DIR] [pytest args...]    (default: problems)

Runs the selection once per launcher (torchrun, fork) with the reference as candidate, each into
its own report, and prints the median of every phase over the items (kernelbench overhead's
columns: launch = wall minus what the ranks measured; overhead = wall minus the timed work).
A benchmark, not a test: figures depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from pytest_kernelbench.cli import overhead  # noqa: E402

LAUNCHERS = ("torchrun", "fork")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "reports" / "overhead"), help="folder for the two reports")
    ap.add_argument("--launchers", default=",".join(LAUNCHERS))
    args, rest = ap.parse_known_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = {}
    for launcher in args.launchers.split(","):
        report = out / f"{stamp}-{launcher}.json"
        cmd = [sys.executable, "-m", "pytest", "-p", "pytest_kernelbench.plugin", "-p", "no:cacheprovider", "-q",
               "--kb-candidate=reference", f"--kb-launcher={launcher}", f"--kb-report={report}", *(rest or ["problems"])]
        t0 = time.monotonic()
        subprocess.run(cmd, cwd=REPO, check=False)
        doc = json.loads(report.read_text())
        results[launcher] = (overhead.medians(doc), len(overhead.rows(doc)), time.monotonic() - t0, report)
    names = overhead.NAMES
    print("\n| launcher | items | run s | " + " | ".join(f"median {n}" for n in names) + " | report |")
    print("|" + "---|" * (len(names) + 4))
    for launcher, (med, n, run_s, report) in results.items():
        cells = " | ".join(f"{med[k]:.2f}" for k in names) if med else " | ".join("-" for _ in names)
        print(f"| {launcher} | {n} | {run_s:.0f} | {cells} | {report.relative_to(REPO) if report.is_relative_to(REPO) else report} |")


if __name__ == "__main__":
    main()
