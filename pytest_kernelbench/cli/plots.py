"""The leaderboard's plots, drawn with matplotlib's Agg canvas (no display, no pyplot state):
pass rate and GM-speedup by category and by difficulty, speedups by verdict tier, cumulative pass
by refinement round, and the roofline of candidate against reference. matplotlib is the optional
extra `plot`, imported only here and only when a plot is asked for."""
from __future__ import annotations

import io
from typing import TYPE_CHECKING

from .. import metrics
from .leaderboard import Score, tag_order

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MISSING = "plots need matplotlib: pip install 'pytest-kernelbench[plot]'"
TIER_COLORS = {"better": "#2ca02c", "on_par": "#1f77b4", "degraded": "#ff7f0e", "severely_degraded": "#d62728"}
DPI = 80          # small PNGs: they are committed and embedded in the page


class PlotsUnavailable(Exception):
    pass


def _figure(width: float = 7.0, height: float = 3.6):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotsUnavailable(MISSING) from None
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    if not fig.legends:
        fig.tight_layout()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#555555")
    ax.set_xticks([])
    ax.set_yticks([])


def _bars(ax: Axes, scores: list[Score], key: str, value: str, ylabel: str) -> None:
    """Grouped bars: one group per tag of `key`, one bar per entry."""
    tags = tag_order(key, {t for s in scores for t in s.breakdowns.get(key, {})})
    shown = [s for s in scores if any(s.breakdowns.get(key, {}).get(t, {}).get(value) is not None for t in tags)]
    if not tags or not shown:
        _empty(ax, "cpu: not a speed (no entry measured speed)" if value == "gm_speedup" else "no data")
        return
    width = 0.8 / len(shown)
    for n, s in enumerate(shown):
        ys = [s.breakdowns[key].get(t, {}).get(value) for t in tags]
        xs = [i + n * width - 0.4 + width / 2 for i in range(len(tags))]
        ax.bar([x for x, y in zip(xs, ys) if y is not None], [y for y in ys if y is not None], width,
               label=s.label[:48])
    ax.set_xticks(range(len(tags)))
    ax.set_xticklabels(tags, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if value == "gm_speedup":
        ax.axhline(1.0, color="#444444", lw=0.8, ls="--")


def by_tag(scores: list[Score], key: str):
    fig = _figure()
    left, right = fig.subplots(1, 2)
    _bars(left, scores, key, "pass_rate", "pass rate")
    left.set_ylim(0, 1.05)
    _bars(right, scores, key, "gm_speedup", "GM-speedup (passed)")
    handles, labels = left.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=min(3, len(handles)), frameon=False)
        fig.tight_layout(rect=(0, 0.1, 1, 0.93))
    fig.suptitle(f"by {key.rstrip('s') if key == 'libraries' else key}", fontsize=10)
    return fig


def speedup_tiers(scores: list[Score]):
    """Each passed item's score, one column per entry, coloured by its verdict tier."""
    fig = _figure()
    ax = fig.subplots()
    timed = [s for s in scores if s.no_speed is None]
    if not timed:
        _empty(ax, "cpu: not a speed (no entry measured speed)")
        return fig
    for x, s in enumerate(timed):
        passed = [i for i in s.entry.items if i.get("outcome") == "passed" and i.get("score")]
        for n, i in enumerate(sorted(passed, key=lambda i: i["score"])):
            jitter = ((n % 15) - 7) * 0.025
            ax.scatter(x + jitter, i["score"], s=14, color=TIER_COLORS.get(i.get("verdict") or "", "#7f7f7f"))
    for name, lower in metrics.TIERS[:-1]:
        ax.axhline(lower, color=TIER_COLORS[name], lw=0.7, ls=":")
    for name, color in TIER_COLORS.items():
        ax.scatter([], [], color=color, label=name, s=14)
    ax.set_yscale("log")
    ticks = [0.5, 0.6, 0.95, 1.2, 1.5, 2, 3, 4]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{v:g}" for v in ticks])
    ax.minorticks_off()
    ax.set_xlim(-0.5, len(timed) - 0.5)
    ax.set_xticks(range(len(timed)))
    ax.set_xticklabels([s.label[:48] for s in timed], rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("speedup (GM over sizes)")
    ax.legend(fontsize=7)
    ax.set_title("speedup by verdict tier", fontsize=10)
    return fig


def refinement(scores: list[Score]):
    fig = _figure(5.0, 3.4)
    ax = fig.subplots()
    shown = [s for s in scores if s.pass_by_round]
    if not shown:
        _empty(ax, "no counted item")
        return fig
    for s in shown:
        rounds = range(1, len(s.pass_by_round) + 1)
        ax.plot(list(rounds), s.pass_by_round, marker="o", label=s.label[:48])
    ax.set_xlabel("refinement round")
    ax.set_ylabel("cumulative pass rate")
    ax.set_ylim(0, 1.05)
    ax.set_xticks(range(1, max(len(s.pass_by_round) for s in shown) + 1))
    ax.legend(fontsize=7)
    ax.set_title("pass by refinement round", fontsize=10)
    return fig


def roofline(scores: list[Score]):
    """Per passed item: reference roofline fraction (x) against the candidate's (y)."""
    fig = _figure(5.0, 4.0)
    ax = fig.subplots()
    drawn = False
    for s in scores:
        pts = [((i.get("roofline") or {}).get("reference"), (i.get("roofline") or {}).get("candidate"))
               for i in s.entry.items if i.get("outcome") == "passed"]
        pts = [(x, y) for x, y in pts if x and y]
        if pts:
            drawn = True
            ax.scatter([x for x, _ in pts], [y for _, y in pts], s=14, label=s.label[:48])
    if not drawn:
        _empty(ax, "no roofline (cpu: not a speed)")
        return fig
    ax.set_xscale("log")
    ax.set_yscale("log")
    lo, hi = ax.get_xlim()
    ax.plot([lo, hi], [lo, hi], color="#444444", lw=0.8, ls="--")
    ax.set_xlabel("reference: fraction of roofline")
    ax.set_ylabel("candidate: fraction of roofline")
    ax.legend(fontsize=7)
    ax.set_title("roofline: candidate vs reference", fontsize=10)
    return fig


def render(scores: list[Score]) -> list[tuple[str, str, bytes]]:
    """(file stem, title, PNG bytes) of every plot; raises PlotsUnavailable without matplotlib."""
    figs = [("category", "Pass rate and GM-speedup by category", by_tag(scores, "category")),
            ("difficulty", "Pass rate and GM-speedup by difficulty", by_tag(scores, "difficulty")),
            ("speedup_tiers", "Speedup distribution by verdict tier", speedup_tiers(scores)),
            ("refinement", "Cumulative pass by refinement round", refinement(scores)),
            ("roofline", "Roofline: candidate vs reference", roofline(scores))]
    return [(stem, title, _png(fig)) for stem, title, fig in figs]
