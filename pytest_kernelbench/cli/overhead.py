"""Where an item's wall time goes (a benchmark of the harness itself).

    kernelbench overhead REPORT.json [--md OUT.md]

Per item: wall, launch (torchrun + interpreter + torch import, i.e. wall minus what the ranks
measured), setup (process group, harness, candidate import/compile), correctness, timing, the
overhead (wall minus the timed GPU work), the timed rounds and the harness's own cost per round
(the overhead grows with the rounds the machine's noise asks for; the cost per round is the harness's).
"""
from __future__ import annotations

import statistics

from ..metrics import timed_seconds
from ..protocol import Outcome

HEADER = ("| problem | W | wall s | launch s | setup s | correctness s | timing s | timed GPU work s | "
          "overhead s | rounds | own ms per round |")
NAMES = ("wall_s", "launch_s", "setup_s", "correctness_s", "timing_s", "timed_s", "overhead_s", "rounds",
         "own_ms_per_round")


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
                    it.get("overhead_s") or 0, *_rounds(it["sizes"])))
    return out


def _rounds(sizes: list[dict]) -> tuple[int, float]:
    """The item's timed rounds, and the harness's own milliseconds per round: fresh inputs and
    restores, the checks of timed calls, and each window's time outside its timed part. Adaptive
    rounds follow the machine's noise; this cost per round does not."""
    rounds, own = 0, 0.0
    for s in sizes:
        t = s.get("timing") or {}
        spent = t.get("spent_s") or {}
        n = len((t.get("reference") or {}).get("rounds_s") or [])
        if not n or not spent:
            continue
        rounds += n
        windows = ("refill", "checks", "reference", "candidate", *(t.get("baselines") or {}))    # and any baseline's
        own += sum(spent.get(k, 0) for k in windows) - timed_seconds(s)
    return rounds, (1e3 * own / rounds if rounds else 0.0)


def medians(doc: dict) -> dict[str, float] | None:
    """The median of each column over the items (None without items that ran)."""
    found = rows(doc)
    if not found:
        return None
    return {n: statistics.median(r[2 + i] for r in found) for i, n in enumerate(NAMES)}


def table(doc: dict) -> list[str]:
    lines = [HEADER, "|" + "---|" * 11]
    for r in rows(doc):
        lines.append(f"| {r[0]} | {r[1]} | " + " | ".join(_cell(n, x) for n, x in zip(NAMES, r[2:])) + " |")
    med = medians(doc)
    if med:
        lines.append(f"| **median of {len(rows(doc))}** | | " + " | ".join(_cell(n, v) for n, v in med.items()) + " |")
    return lines


FORMATS = {"rounds": "{:.0f}", "own_ms_per_round": "{:.1f}"}


def _cell(name: str, x: float) -> str:
    return FORMATS.get(name, "{:.2f}").format(x)
