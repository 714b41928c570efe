"""Per-problem, per-size table of a reference-as-candidate run (the self-check): reference
roofline fraction and self-check speedup per size, problems sorted by roofline (furthest below
first), then how far the exact copy's speedups stray from 1.00 per size.

    kernelbench suite-table reports/baselines/2026-11-21-h200x4-all50-reference.json [--md OUT]
"""
from __future__ import annotations

from ..metrics import geomean
from ..protocol import Outcome


def _roof(size: dict) -> str:
    """The reference's roofline fraction of a size, with what bounds it where the report says
    (latency, link, hbm, flops) and a mark where it was flagged suspect."""
    fr = (size.get("roofline") or {}).get("reference")
    text = "-" if fr is None else f"{100 * fr:.1f} %"
    if size.get("roof_bound"):
        text += f" ({size['roof_bound']})"
    return text + (" suspect" if size.get("suspect") else "")


def table(doc: dict) -> list[str]:
    items = [it for it in doc["items"] if it.get("outcome") == Outcome.PASSED]
    sizes = [s["name"] for s in items[0]["sizes"]] if items else []
    m = doc.get("machine") or {}
    lines = [f"{len(items)}/{len(doc['items'])} passed; machine: {m.get('gpu_model')} x"
             f"{m.get('gpu_count')}, torch {m.get('torch')}, NCCL {m.get('nccl')}", "",
             "| problem | roofline GM | " + " | ".join(f"roof {n}" for n in sizes) + " | "
             + " | ".join(f"self-check {n}" for n in sizes) + " |",
             "|---" * (2 + 2 * len(sizes)) + "|"]
    for it in sorted(items, key=lambda it: it["roofline"]["reference"] or 0.0):
        by = {s["name"]: s for s in it["sizes"]}
        roofs = [_roof(by[n]) for n in sizes]
        speeds = [f"{by[n]['speedup']:.3f}" for n in sizes]
        lines.append(f"| {it['problem']} | {100 * it['roofline']['reference']:.1f} % | " + " | ".join(roofs)
                     + " | " + " | ".join(speeds) + " |")
    lines += ["", "| size | items | self-check min | max | within 3 % | within 5 % | GM |", "|---|---|---|---|---|---|---|"]
    for n in sizes:
        v = [s["speedup"] for it in items for s in it["sizes"] if s["name"] == n]
        gm = geomean(v)
        lines.append(f"| {n} | {len(v)} | {min(v):.3f} | {max(v):.3f} | {sum(abs(x - 1) <= 0.03 for x in v)} | "
                     f"{sum(abs(x - 1) <= 0.05 for x in v)} | {gm:.3f} |")
    return lines
