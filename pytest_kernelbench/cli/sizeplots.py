"""`kernelbench plots REPORT... --png DIR`: per item, latency and bus bandwidth over size, the
candidate's and the reference's, log-log: the picture a kernel developer looks for first (a sweep,
--kb-sweep, gives it its points), and each baseline's line where --kb-baselines timed some. The numbers are the report's: each size's nccl-tests size S
(bytes_per_rank), median time per call (p99 as the band's top) and busbw_GBps (algbw_GBps where the
problem declares no collective, or at W = 1, where busbw is 0). An item without bytes per size (no problem.yaml scale) or with no
timed size is left out with the reason. PNGs are at least plots.MIN_PX wide, as the board's."""
from __future__ import annotations

import re

from ..protocol import Outcome
from ..report.persize import human_bytes
from .plots import WIDE, WIDE_PX, Plot, _figure, _png, legend_outside

SIDES = (("candidate", "#d62728", "o"), ("reference", "#1f77b4", "s"))
BASELINE_STYLES = (("#2ca02c", "^"), ("#9467bd", "v"), ("#ff7f0e", "D"), ("#8c564b", "P"))


def stem(item: dict) -> str:
    name = re.sub(r"[^A-Za-z0-9]+", "-", str(item.get("problem") or "item")).strip("-")
    sample = f"-s{item['sample']}" if item.get("sample") is not None else ""
    return f"sizes-{name}-w{item.get('world_size') or 0}{sample}"


def _points(item: dict) -> tuple[list[dict], str]:
    """The item's sizes that can be drawn, by S; else why none."""
    if item.get("outcome") != Outcome.PASSED:
        return [], f"{item.get('outcome')}: no timed sizes"
    timed = [s for s in item.get("sizes") or [] if (s.get("timing") or {}).get("candidate")]
    if not timed:
        return [], "no timed size (--kb-timing=off?)"
    sized = [s for s in timed if s.get("bytes_per_rank")]
    if not sized:
        return [], "no bytes per size: the problem declares no size field that scales (problem.yaml scale)"
    return sorted(sized, key=lambda s: s["bytes_per_rank"]), ""


def _lines(item: dict, sizes: list[dict]) -> list[tuple[str, str, str, str]]:
    """(side, colour, marker, label) of each line: the candidate, the reference, then each
    baseline timed (--kb-baselines; "baseline:NAME"), labelled as problem.yaml names them."""
    said = item.get("baselines") or {}
    ref = said.get("reference_label")
    out = [(side, color, marker, f"reference ({ref})" if side == "reference" and ref and ref != "reference" else side)
           for side, color, marker in SIDES]
    names = list(dict.fromkeys(n for s in sizes for n in ((s.get("timing") or {}).get("baselines") or {})))
    for k, name in enumerate(names):
        color, marker = BASELINE_STYLES[k % len(BASELINE_STYLES)]
        out.append((f"baseline:{name}", color, marker, str((said.get("timed") or {}).get(name) or name)))
    return out


def _side(size: dict, side: str) -> dict:
    """A line's timing at a size: the candidate's, the reference's or a baseline's."""
    timing = size.get("timing") or {}
    if side.startswith("baseline:"):
        return (timing.get("baselines") or {}).get(side.split(":", 1)[1]) or {}
    return timing.get(side) or {}


def _bw(size: dict, side: str, unit: str) -> float | None:
    if side.startswith("baseline:"):
        return _side(size, side).get(f"{unit}_GBps")
    return (size.get(f"{unit}_GBps") or {}).get(side)


def item_plot(item: dict) -> Plot:
    title = f"{item.get('problem')} (W={item.get('world_size')}): latency and bandwidth over size"
    sizes, why = _points(item)
    if not sizes:
        return Plot(stem(item), title, None, why)
    # busbw is 0 at W = 1 (nccl-tests' factors): then algbw, which still says something
    unit = "busbw" if any(v for s in sizes for v in (s.get("busbw_GBps") or {}).values()) else "algbw"
    fig = _figure(WIDE, 3.6, px=WIDE_PX)
    lat, bw = fig.subplots(1, 2)
    xs = [s["bytes_per_rank"] for s in sizes]
    handles, labels = [], []
    for side, color, marker, label in _lines(item, sizes):
        pts = [(x, _side(s, side)) for x, s in zip(xs, sizes)]
        pts = [(x, t) for x, t in pts if t.get("median_s")]
        if pts:
            px = [x for x, _ in pts]
            (h,) = lat.plot(px, [t["median_s"] * 1e6 for _, t in pts], marker=marker, color=color, lw=1.4, ms=4)
            top = [(t.get("p99_s") or t["median_s"]) * 1e6 for _, t in pts]
            lat.fill_between(px, [t["median_s"] * 1e6 for _, t in pts], top, color=color, alpha=0.15, lw=0)
            handles.append(h)
            labels.append(f"{label} (median; shaded to p99)")
        bws = [(x, _bw(s, side, unit)) for x, s in zip(xs, sizes)]
        bws = [(x, v) for x, v in bws if v]
        if bws:
            bw.plot([x for x, _ in bws], [v for _, v in bws], marker=marker, color=color, lw=1.4, ms=4)
    for ax, ylabel in ((lat, "time per call (us)"), (bw, f"{unit} (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(xs if len(xs) <= 12 else xs[::2])
        ax.set_xticklabels([human_bytes(x) for x in (xs if len(xs) <= 12 else xs[::2])], fontsize=7, rotation=45)
        ax.set_xlabel("size S (bytes, nccl-tests)", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.tick_params(axis="y", which="both", labelsize=7)
    note = "" if item.get("device") == "cuda" else "cpu (gloo): the times exercise the protocol, no GPU speed"
    fig.suptitle(title + (f"\n{note}" if note else ""), fontsize=9)
    legend_outside(fig, handles, labels, most=max(2, len(labels)))
    return Plot(stem(item), title, _png(fig), note, wide=True)


def render(items: list[dict]) -> list[Plot]:
    """One plot per item (drawn, or left out with the reason); PlotsUnavailable without matplotlib."""
    _figure(1, 1)
    return [item_plot(i) for i in items]
