"""The leaderboard's plots, drawn with matplotlib's Agg canvas (no display, no pyplot state):
pass rate and GM-speedup by category and by difficulty, speedups by verdict tier, cumulative pass
by refinement round, and the roofline of candidate against reference. A plot with nothing to show
(no speed on CPU, one round only) is left out with the reason, never drawn as an empty frame.
Legends sit outside the axes, in the columns that fit, the figure grown to hold them: they cover
no point and are never cut off. matplotlib is the optional extra `plot`, imported only here and
only when a plot is asked for."""
from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import metrics
from ..protocol import Outcome, Tier
from .leaderboard import Score, tag_order

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MISSING = "plots need matplotlib: pip install 'pytest-kernelbench[plot]'"
TIER_COLORS: dict[str, str] = {Tier.BETTER: "#2ca02c", Tier.ON_PAR: "#1f77b4", Tier.DEGRADED: "#ff7f0e",
                               Tier.SEVERELY_DEGRADED: "#d62728"}
DPI = 80          # the least resolution; a narrow figure gets more, so that every PNG is MIN_PX wide
MIN_PX = 1000     # a PNG narrower than this is blurred when the page shows it at half of 1400 px
WIDE_PX = 1400    # a wide figure's PNG: the page shows it across the whole window
WIDE = 8.0        # inches: a two-panel figure (the page gives it the whole width)
ZERO_STUB = 0.03  # height (on the pass-rate axis of 0-1.05) of the hatched stub that shows a 0 % bar
NO_SPEED = "no entry measured speed (cpu: not a speed)"
LOG_TICKS = (0.001, 0.01, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)


class PlotsUnavailable(Exception):
    pass


@dataclass
class Plot:
    """One plot of the page: its PNG, or None with why it was left out (`note` may also say
    which part of a drawn plot was left out)."""
    stem: str
    title: str
    png: bytes | None
    note: str = ""
    wide: bool = False        # two panels or one long axis: the page gives it the whole width


def _figure(width: float, height: float, px: int = MIN_PX) -> Figure:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotsUnavailable(MISSING) from None
    fig = Figure(figsize=(width, height), dpi=max(DPI, math.ceil(px / width)), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> bytes:
    """The figure as a PNG of at most 128 colours (Pillow comes with matplotlib): a third of the
    bytes of the full-colour one, and no difference a reader can see in flat-coloured plots."""
    from PIL import Image
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi)
    buf.seek(0)
    out = io.BytesIO()
    Image.open(buf).convert("RGB").quantize(colors=128).save(out, format="PNG", optimize=True)
    return out.getvalue()


def colors(scores: list[Score]) -> dict[str, Any]:
    """One colour per entry, the same in every plot (tab20 once tab10 would repeat)."""
    from matplotlib import colormaps
    cmap = colormaps["tab10" if len(scores) <= 10 else "tab20"]
    return {s.label: cmap(n % cmap.N) for n, s in enumerate(scores)}


LABEL_MOST = 64      # characters of an entry's label in a legend: a run of many shipped solutions names them all


def short(label: str) -> str:
    """The label as a legend shows it: the middle elided past LABEL_MOST characters, keeping the
    start (the candidate) and the end (the machine and world size), which tell entries apart."""
    label = label.replace("NVIDIA ", "")
    if len(label) <= LABEL_MOST:
        return label
    head = LABEL_MOST // 2 - 1
    return label[:head] + "…" + label[len(label) - (LABEL_MOST - head - 1):]


def legend_outside(fig: Figure, handles: list, labels: list[str], where: str = "lower", most: int = 3) -> None:
    """The legend under (or over) the axes in as many columns (at most `most`) as fit the
    figure's width; the figure grows by the legend's height, so the axes keep theirs."""
    if not handles:
        return
    height = fig.get_figheight()
    legend = None
    for ncol in range(min(most, len(handles)), 0, -1):
        legend = fig.legend(handles, labels, loc="outside upper center" if where == "upper" else "outside lower center",
                            ncol=ncol, fontsize=7, frameon=False)
        fig.canvas.draw()
        if legend.get_window_extent().width <= 0.98 * fig.bbox.width or ncol == 1:
            break
        legend.remove()
    assert legend is not None
    fig.set_figheight(height + legend.get_window_extent().height / fig.dpi + 0.1)


def _bars(ax: Axes, scores: list[Score], tags: list[str], key: str, value: str, color: dict) -> tuple[list[Score], int]:
    """Grouped bars: one group per tag of `key`, one bar per entry that has a value there. A value
    of 0 (items counted, none passed) is a hatched stub marked 0, so that it does not look like a
    tag the entry never ran (no bar). Returns the entries shown and how many stubs were drawn."""
    shown = [s for s in scores if any(s.breakdowns.get(key, {}).get(t, {}).get(value) is not None for t in tags)]
    width = 0.8 / max(len(shown), 1)
    stubs = 0
    for n, s in enumerate(shown):
        ys = [s.breakdowns[key].get(t, {}).get(value) for t in tags]
        xs = [i + n * width - 0.4 + width / 2 for i in range(len(tags))]
        ax.bar([x for x, y in zip(xs, ys) if y], [y for y in ys if y], width,
               label=short(s.label), color=color[s.label])
        zeros = [x for x, y in zip(xs, ys) if y == 0]
        if zeros:
            ax.bar(zeros, [ZERO_STUB] * len(zeros), width, color="white", edgecolor=color[s.label], hatch="////",
                   lw=0.8, gid="zero")
            for x in zeros:
                ax.text(x, ZERO_STUB, "0", ha="center", va="bottom", fontsize=6, color="#222222")
            stubs += len(zeros)
    ax.set_xticks(range(len(tags)))
    ax.set_xticklabels(tags, rotation=30, ha="right", fontsize=8)
    return shown, stubs


def by_tag(scores: list[Score], key: str) -> tuple[Figure | None, str]:
    """Pass rate by tag, and GM-speedup by tag beside it where any entry measured speed."""
    counted = {t for s in scores for t, g in s.breakdowns.get(key, {}).items() if g.get("total")}
    tags = tag_order(key, counted)
    if not tags:
        return None, "no counted item"
    speed = any(g.get("gm_speedup") is not None for s in scores for g in s.breakdowns.get(key, {}).values())
    fig = _figure(WIDE, 3.0, WIDE_PX) if speed else _figure(WIDE / 2 + 0.6, 3.0)
    axes = fig.subplots(1, 2) if speed else [fig.subplots()]
    color = colors(scores)
    shown, stubs = _bars(axes[0], scores, tags, key, "pass_rate", color)
    axes[0].set_ylim(0, 1.05)
    axes[0].set_ylabel("pass rate")
    if speed:
        _bars(axes[1], scores, tags, key, "gm_speedup", color)
        axes[1].set_ylabel("GM-speedup (passed)")
        axes[1].axhline(1.0, color="#444444", lw=0.8, ls="--")
    fig.suptitle(f"by {'library' if key == 'libraries' else key}", fontsize=10)
    handles, labels = [_patch(color[s.label]) for s in shown], [short(s.label) for s in shown]
    if stubs:
        handles.append(_patch("white", edgecolor="#444444", hatch="////"))
        labels.append("0 % (counted, none passed); no bar: none ran")
    legend_outside(fig, handles, labels)
    return fig, "" if speed else f"GM-speedup left out: {NO_SPEED}"


def _patch(color: Any, **style: Any) -> Any:
    from matplotlib.patches import Patch
    return Patch(facecolor=color, **style)


def _log_ticks(ax: Axes, axis: str, lo: float, hi: float) -> None:
    ticks = [t for t in LOG_TICKS if lo <= t <= hi] or [1]
    (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks)
    (ax.set_xticklabels if axis == "x" else ax.set_yticklabels)([f"{t:g}" for t in ticks])


def speedup_tiers(scores: list[Score]) -> tuple[Figure | None, str]:
    """Each passed item's score, one line per entry (the first ranked on top), coloured by its
    verdict tier; the tier bounds as dotted lines."""
    timed = [s for s in scores if s.no_speed is None]
    if not timed:
        return None, NO_SPEED
    fig = _figure(WIDE, 0.9 + 0.28 * len(timed), WIDE_PX)
    ax = fig.subplots()
    values = []
    for y, s in enumerate(reversed(timed)):
        passed = sorted((i for i in s.entry.items if i.get("outcome") == Outcome.PASSED and i.get("score")),
                        key=lambda i: i["score"])
        for n, i in enumerate(passed):
            values.append(i["score"])
            ax.scatter(i["score"], y + ((n % 7) - 3) * 0.06, s=10,
                       color=TIER_COLORS.get(i.get("verdict") or "", "#7f7f7f"))
    for name, lower in metrics.TIERS[:-1]:
        ax.axvline(lower, color=TIER_COLORS[name], lw=0.7, ls=":")
    ax.set_xscale("log")
    lo, hi = min(values, default=0.5), max(values, default=2)
    ax.set_xlim(min(lo, 0.5) / 1.2, max(hi, 2) * 1.2)
    _log_ticks(ax, "x", *ax.get_xlim())
    ax.minorticks_off()
    ax.set_ylim(-0.6, len(timed) - 0.4)
    ax.set_yticks(range(len(timed)))
    ax.set_yticklabels([short(s.label) for s in reversed(timed)], fontsize=7)
    ax.set_xlabel("speedup (GM over sizes); dotted: tier bounds 0.6, 0.95, 1.2")
    ax.set_title("speedup by verdict tier", fontsize=10)
    tiers = list(TIER_COLORS)
    legend_outside(fig, [_dot(TIER_COLORS[t]) for t in tiers], tiers, "upper", most=4)
    return fig, ""


def _dot(color: Any) -> Any:
    from matplotlib.lines import Line2D
    return Line2D([], [], marker="o", ls="", color=color, markersize=4)


def refinement(scores: list[Score]) -> tuple[Figure | None, str]:
    shown = [s for s in scores if len(s.pass_by_round) > 1]
    if not shown:
        return None, "every entry ran one refinement round: no round to compare"
    fig = _figure(WIDE / 2 + 0.6, 3.0)
    ax = fig.subplots()
    color = colors(scores)
    for s in shown:
        rounds = range(1, len(s.pass_by_round) + 1)
        ax.plot(list(rounds), s.pass_by_round, marker="o", color=color[s.label])
    ax.set_xlabel("refinement round")
    ax.set_ylabel("cumulative pass rate")
    ax.set_ylim(0, 1.05)
    ax.set_xticks(range(1, max(len(s.pass_by_round) for s in shown) + 1))
    ax.set_title("pass by refinement round", fontsize=10)
    legend_outside(fig, [_dot(color[s.label]) for s in shown], [short(s.label) for s in shown])
    return fig, ""


def roofline(scores: list[Score]) -> tuple[Figure | None, str]:
    """Per passed item: reference roofline fraction (x) against the candidate's (y)."""
    drawn = []
    for s in scores:
        pts: list[tuple[float, float]] = []
        for i in s.entry.items:
            fractions = i.get("roofline") or {}
            x, y = fractions.get("reference"), fractions.get("candidate")
            if i.get("outcome") == Outcome.PASSED and x and y:
                pts.append((float(x), float(y)))
        if pts:
            drawn.append((s, pts))
    if not drawn:
        return None, "no passed item has a roofline fraction (cpu: not a speed)"
    fig = _figure(WIDE / 2 + 0.6, 3.6)
    ax = fig.subplots()
    color = colors(scores)
    for s, pts in drawn:
        ax.scatter([x for x, _ in pts], [y for _, y in pts], s=12, color=color[s.label])
    ax.set_xscale("log")
    ax.set_yscale("log")
    every = [v for _, pts in drawn for p in pts for v in p]
    lo, hi = min(every) / 2, max(every) * 2
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.plot([lo, hi], [lo, hi], color="#444444", lw=0.8, ls="--")
    ticks = [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    for setter in (ax.set_xticks, ax.set_yticks):
        setter([t for t in ticks if lo <= t <= hi])
    ax.minorticks_off()
    ax.set_xlabel("reference: fraction of roofline")
    ax.set_ylabel("candidate: fraction of roofline")
    ax.set_title("roofline: candidate vs reference", fontsize=10)
    legend_outside(fig, [_dot(color[s.label]) for s, _ in drawn], [short(s.label) for s, _ in drawn])
    return fig, ""


def render(scores: list[Score]) -> list[Plot]:
    """Every plot: drawn, or left out with the reason; raises PlotsUnavailable without matplotlib."""
    _figure(1, 1)         # matplotlib or PlotsUnavailable, before any work
    out = []
    for key in ("category", "difficulty"):
        fig, note = by_tag(scores, key)
        what = "Pass rate" if note.startswith("GM-speedup") else "Pass rate and GM-speedup"
        out.append(Plot(key, f"{what} by {key}", _png(fig) if fig else None, note, wide=not note))
    for stem, title, (fig, note) in (
            ("speedup_tiers", "Speedup distribution by verdict tier", speedup_tiers(scores)),
            ("refinement", "Cumulative pass by refinement round", refinement(scores)),
            ("roofline", "Roofline: candidate vs reference", roofline(scores))):
        out.append(Plot(stem, title, _png(fig) if fig else None, note, wide=stem == "speedup_tiers"))
    return out
