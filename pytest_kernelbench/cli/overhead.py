"""Where an item's wall time goes (a benchmark of the harness itself).

    kernelbench overhead REPORT.json [--md OUT.md]

Per item: wall, launch (torchrun + interpreter + torch import, i.e. wall minus what the ranks
measured), setup (process group, harness, candidate import/compile), correctness, timing, and the
overhead (wall minus the timed GPU work).
"""
from __future__ import annotations

import statistics

from ..protocol import Outcome

HEADER = ("| problem | W | wall s | launch s | setup s | correctness s | timing s | timed GPU work s | "
          "overhead s |")


def rows(doc: dict) -> list[tuple]:
    out = []
    for it in sorted(doc["items"], key=lambda i: i["problem"]):
        if it.get("outcome") not in (Outcome.PASSED, Outcome.FAILED) or not it.get("phases_s"):
            continue
        ph = it["phases_s"]
        setup = (ph.get("init_s") or 0) + (ph.get("import_s") or 0)
        corr = sum(s.get("correctness_s") or 0 for s in it["sizes"])
        timing = sum(s.get("timing_s") or 0 for s in it["sizes"])
        launch = it["wall_s"] - setup - (ph.get("sizes_s") or corr + timing)
        out.append((it["problem"], it["world_size"], it["wall_s"], launch, setup, corr, timing, it.get("timed_s") or 0,
                    it.get("overhead_s") or 0))
    return out


def medians(doc: dict) -> dict[str, float] | None:
    """The median of each column over the items (None without items that ran)."""
    found = rows(doc)
    if not found:
        return None
    names = ("wall_s", "launch_s", "setup_s", "correctness_s", "timing_s", "timed_s", "overhead_s")
    return {n: statistics.median(r[2 + i] for r in found) for i, n in enumerate(names)}


def table(doc: dict) -> list[str]:
    lines = [HEADER, "|" + "---|" * 9]
    for r in rows(doc):
        lines.append(f"| {r[0]} | {r[1]} | " + " | ".join(f"{x:.2f}" for x in r[2:]) + " |")
    med = medians(doc)
    if med:
        lines.append(f"| **median of {len(rows(doc))}** | | " + " | ".join(f"{v:.2f}" for v in med.values()) + " |")
    return lines
