"""Two runs side by side: per item (outcome, score, noise band) and over the run (pass rate,
GM-speedup, Pass x GM, PASS+Good, fast_1, roofline GM). A speed delta is a regression only when
it passes the threshold and the noise bands of the two scores do not overlap (metrics.speed_change);
a pass regression is an item that passed in BASE and failed in NEW (one that errored in NEW is
"retryable": the infrastructure's, no verdict on the candidate, never a regression). `--fail-on`
(`kernelbench compare`) and `--kb-compare-fail` (pytest) choose which regressions fail; `latency`
and `busbw` there compare each size's candidate time and bandwidth (report/sizediff.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import metrics
from ..protocol import Outcome
from . import reading as reports
from . import sizediff

DEFAULT_THRESHOLD = 0.05     # how far a speed delta must go to be called a change when no --fail-on says
# per size, when the term gives no threshold: mscclpp's CI (15 % latency, 5 % throughput)
DEFAULT_LATENCY, DEFAULT_THROUGHPUT = 0.15, 0.05


@dataclass
class FailOn:
    speedup: float | None = None    # fail on a speed regression past this fraction (beyond noise)
    passing: bool = False           # fail on an item that passed in BASE and not in NEW
    latency: float | None = None    # fail on a size whose candidate time rose past this fraction (beyond noise)
    throughput: float | None = None     # ... whose busbw (else algbw) fell past this fraction

    def describe(self) -> str:
        parts = ([f"speedup down more than {self.speedup:.1%} beyond noise"] if self.speedup is not None else []) + \
                (["a pass lost"] if self.passing else []) + \
                ([f"a size's latency up more than {self.latency:.1%} beyond noise"] if self.latency is not None else []) + \
                ([f"a size's bandwidth down more than {self.throughput:.1%} beyond noise"]
                 if self.throughput is not None else [])
        return ", ".join(parts) or "nothing (report only)"


def parse_fail_on(text: str | None) -> FailOn:
    """`speedup:5%,pass,latency:15%,busbw:5%` (also `speedup:0.05`, `speedup` = 5 %, `latency` = 15 %,
    `busbw` = 5 %, `none`); ValueError says what is wrong."""
    out = FailOn()
    for term in filter(None, (t.strip() for t in (text or "").split(","))):
        name, _, value = term.partition(":")
        if name == "none" and not value:
            continue
        if name == "pass" and not value:
            out.passing = True
        elif name == "speedup":
            out.speedup = _fraction(value) if value else DEFAULT_THRESHOLD
        elif name == "latency":
            out.latency = _fraction(value, name) if value else DEFAULT_LATENCY
        elif name == "busbw":
            out.throughput = _fraction(value, name) if value else DEFAULT_THROUGHPUT
        else:
            raise ValueError(f"{term!r}: expected speedup[:N%], pass, latency[:N%], busbw[:N%] or none")
    return out


def _fraction(value: str, name: str = "speedup") -> float:
    try:
        x = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise ValueError(f"{name}:{value}: expected a threshold such as 5% or 0.05") from None
    if not 0 <= x < 1:
        raise ValueError(f"{name}:{value}: the threshold must lie in [0, 100%)")
    return x


@dataclass
class ItemDelta:
    problem: str
    sample: int | None
    base: dict | None
    new: dict | None
    change: str           # regression | improvement | noise | lost | fixed | new | gone | same | no speed

    @property
    def name(self) -> str:
        return self.problem + (f" #{self.sample}" if self.sample is not None else "")


@dataclass
class Comparison:
    base_path: str
    new_path: str
    fail_on: FailOn
    threshold: float
    items: list[ItemDelta] = field(default_factory=list)
    aggregates: list[tuple[str, float | None, float | None]] = field(default_factory=list)
    common_gm: tuple[float | None, float | None, str | None, int] = (None, None, None, 0)
    regressions: list[str] = field(default_factory=list)
    not_selected: int = 0      # --kb-compare: BASE's items this run did not select (not compared)
    sizes: list[sizediff.SizeDelta] = field(default_factory=list)
    per_size: bool = False     # print the per-size table (asked for, or a latency/busbw term fails on it)

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    def lines(self) -> list[str]:
        return _lines(self)


def _outcome(rec: dict | None) -> str:
    if rec is None:
        return "-"
    out = rec.get("outcome") or "?"
    return f"{out}:{rec.get('failure')}" if out in (Outcome.FAILED, Outcome.ERROR) else out


def _speed(rec: dict | None) -> str:
    if rec is None or rec.get("outcome") != Outcome.PASSED:
        return ""
    if rec.get("score") is None:
        return rec.get("speed") or "no speed"
    band = rec.get("band")
    return f"{rec['score']:.3f}x" + (f" [{band[0]:.3f}-{band[1]:.3f}]" if band else "")


def _item_change(b: dict | None, n: dict | None, threshold: float) -> str:
    counted = metrics.COUNTED
    if n is not None and n.get("outcome") == Outcome.ERROR and b is not None and b.get("outcome") in counted:
        return "retryable"       # no verdict in NEW: run it again, not a lost pass
    if b is None or b.get("outcome") not in counted:
        return "new" if n is not None and n.get("outcome") in counted else "same"
    if n is None or n.get("outcome") not in counted:
        return "gone"
    bp, np_ = b["outcome"] == Outcome.PASSED, n["outcome"] == Outcome.PASSED
    if bp and not np_:
        return "lost"
    if np_ and not bp:
        return "fixed"
    if not bp:
        return "same"
    if metrics.is_shared(b) or metrics.is_shared(n):      # a shared GPU's run has no speed to set against any
        return "no speed"
    return metrics.speed_change(b.get("score"), b.get("band"), n.get("score"), n.get("band"), threshold) or "no speed"


AGGREGATES = (("pass rate", "pass_rate"), ("GM-speedup", "gm_speedup"), ("Pass x GM", "pass_x_gm"),
              ("PASS+Good", "pass_good"), ("roofline GM", "roofline_gm"))
RATIOS = ("GM-speedup", "Pass x GM")        # compared as ratios; the shares in percentage points


def compare(base_doc: dict, new_doc: dict, fail_on: FailOn | None = None) -> Comparison:
    fail_on = fail_on or FailOn()
    threshold = fail_on.speedup if fail_on.speedup is not None else DEFAULT_THRESHOLD
    cmp = Comparison(base_doc.get("path", "BASE"), new_doc.get("path", "NEW"), fail_on, threshold)
    base = {(i.get("problem"), i.get("sample")): i for i in reports.items(base_doc)}
    new = {(i.get("problem"), i.get("sample")): i for i in reports.items(new_doc)}
    for key in sorted(set(base) | set(new), key=lambda k: (k[0] or "", k[1] or 0)):
        b, n = base.get(key), new.get(key)
        cmp.items.append(ItemDelta(key[0] or "?", key[1], b, n, _item_change(b, n, threshold)))
    ab, an = metrics.aggregate(list(base.values())), metrics.aggregate(list(new.values()))
    cmp.aggregates = [(label, ab.get(k), an.get(k)) for label, k in AGGREGATES]
    cmp.aggregates.append(("fast_1", (ab.get("fast_p") or {}).get("1.0"), (an.get("fast_p") or {}).get("1.0")))
    # the run's speed over the items passed in both, so a changed selection does not move it
    both = [d for d in cmp.items if d.change in ("regression", "improvement", "noise")]
    if both:
        bs = [d.base for d in both if d.base is not None]       # passed in both: both records there
        ns = [d.new for d in both if d.new is not None]
        gb, gn = metrics.geomean([i.get("score") for i in bs]), metrics.geomean([i.get("score") for i in ns])
        change = metrics.speed_change(gb, metrics.gm_band(bs), gn, metrics.gm_band(ns), threshold)
        cmp.common_gm = (gb, gn, change, len(both))
    cmp.sizes = sizediff.deltas([(d.name, d.base, d.new) for d in cmp.items],
                                fail_on.latency if fail_on.latency is not None else DEFAULT_LATENCY,
                                fail_on.throughput if fail_on.throughput is not None else DEFAULT_THROUGHPUT)
    cmp.per_size = fail_on.latency is not None or fail_on.throughput is not None
    if fail_on.latency is not None:
        cmp.regressions += [f"{s.item}@{s.size}: latency {(s.base_s or 0) * 1e6:.1f} -> {(s.new_s or 0) * 1e6:.1f} us"
                            for s in cmp.sizes if s.latency == "regression"]
    if fail_on.throughput is not None:
        cmp.regressions += [f"{s.item}@{s.size}: {s.unit} {s.base_bw:.1f} -> {s.new_bw:.1f} GB/s"
                            for s in cmp.sizes if s.throughput == "regression"]
    if fail_on.passing:
        cmp.regressions += [f"{d.name}: passed -> {_outcome(d.new)}" for d in cmp.items if d.change == "lost"]
    if fail_on.speedup is not None:
        cmp.regressions += [f"{d.name}: {_speed(d.base)} -> {_speed(d.new)}" for d in cmp.items
                            if d.change == "regression"]
        gb, gn, change, count = cmp.common_gm
        if change == "regression":
            cmp.regressions.append(f"GM-speedup over the {count} items passed in both: {gb:.3f}x -> {gn:.3f}x")
    return cmp


def against(base_path: str, new_doc: dict, fail_on_text: str | None) -> Comparison:
    """The pytest side (--kb-compare): this run's report against BASE, over the items this run
    selected (a run of a few items is not every other item of BASE "gone")."""
    base = reports.load(base_path)
    ran = {i.get("problem") for i in reports.items(new_doc)}
    kept = [i for i in reports.items(base) if i.get("problem") in ran]
    cmp = compare({**base, "items": kept}, new_doc, parse_fail_on(fail_on_text))
    cmp.not_selected = len(reports.items(base)) - len(kept)
    return cmp


def _delta(b: float | None, n: float | None, ratio: bool = True) -> str:
    if b is None or n is None:
        return "-"
    if ratio and b:
        return f"{(n / b - 1):+.1%}"
    return f"{100 * (n - b):+.1f} points"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _lines(c: Comparison) -> list[str]:
    rows = [("item", "base", "new", "delta", "change")]
    for d in c.items:
        b = f"{_outcome(d.base)} {_speed(d.base)}".strip()
        n = f"{_outcome(d.new)} {_speed(d.new)}".strip()
        bs, ns = (d.base or {}).get("score"), (d.new or {}).get("score")
        mark = d.change.upper() if d.change in ("regression", "lost") else d.change
        rows.append((d.name, b, n, _delta(bs, ns) if d.change in ("regression", "improvement", "noise") else "", mark))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    out = [f"comparison: {c.base_path} -> {c.new_path}",
           f"a speed change counts past {c.threshold:.1%} and outside both noise bands; fail on: {c.fail_on.describe()}"]
    out += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    out.append("")
    out += [f"{label:<12} {_fmt(b):>8} -> {_fmt(n):<8} {_delta(b, n, label in RATIOS)}" for label, b, n in c.aggregates]
    gb, gn, change, count = c.common_gm
    if count:
        out.append(f"GM-speedup over the {count} items passed in both: {gb:.3f}x -> {gn:.3f}x "
                   f"({_delta(gb, gn)}, {change})")
    if c.per_size:
        out.append("")
        out += sizediff.lines(c.sizes)
    counts: dict[str, int] = {}
    for d in c.items:
        counts[d.change] = counts.get(d.change, 0) + 1
    shared = [d.name for d in c.items if any(metrics.is_shared(r) for r in (d.base, d.new) if r)]
    if shared:
        out.append(f"shared GPU: {len(shared)} item(s) ran with ranks sharing GPUs in BASE or NEW (--kb-oversubscribe): "
                   "compared by outcome only, never by speed, and outside both runs' speed figures")
    out.append("items: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
               + (f"; {c.not_selected} of BASE not selected in this run (not compared)" if c.not_selected else ""))
    if c.regressions:
        out.append(f"FAILED: {len(c.regressions)} regression(s): " + "; ".join(c.regressions))
    else:
        out.append("no regression that fails the comparison")
    return out
