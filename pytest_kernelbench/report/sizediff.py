"""Two runs per item and size, in a kernel developer's units: the candidate's median time per call
(latency) and its bus bandwidth (busbw, or algbw where the problem declares no collective). A delta
counts past its threshold when the candidate's rounds of the two runs tell them apart (the medians'
noise bands do not overlap), as mscclpp's CI: fail on a 15 % latency or 5 % throughput regression.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import metrics
from ..protocol import Outcome
from ..rank.stats import median_band


@dataclass
class SizeDelta:
    item: str
    size: str
    nbytes: int | None
    base_s: float | None
    new_s: float | None
    unit: str | None                  # busbw | algbw | None (no scale declared)
    base_bw: float | None
    new_bw: float | None
    latency: str | None               # regression | improvement | noise | None
    throughput: str | None


def _side(size: dict) -> tuple[float | None, tuple[float, float] | None]:
    t = (size.get("timing") or {}).get("candidate") or {}
    return t.get("median_s"), median_band(t.get("rounds_s") or [])


def _bw(size: dict) -> tuple[str | None, float | None]:
    for unit in ("busbw", "algbw"):
        v = (size.get(f"{unit}_GBps") or {}).get("candidate")
        if v is not None:
            return unit, v
    return None, None


def _bw_band(band: tuple | None, bw: float, t: float) -> tuple[float, float] | None:
    """A size's bandwidth is (S x factor) / time: its band is the time band's, inverted."""
    return (bw * t / band[1], bw * t / band[0]) if band else None


def change(base: float | None, base_band: tuple | None, new: float | None, new_band: tuple | None,
           threshold: float, higher_is_better: bool) -> str | None:
    """regression / improvement past `threshold` (a fraction of base) with bands apart, else noise."""
    return metrics.speed_change(base, base_band, new, new_band, threshold, higher_is_better)


def deltas(pairs: list[tuple[str, dict | None, dict | None]], latency: float, throughput: float) -> list[SizeDelta]:
    """Per size of the items passed in both runs on GPUs (CPU times are no speed), matched by size name."""
    out = []
    for name, b, n in pairs:
        if not (b and n) or Outcome.PASSED != b.get("outcome") or Outcome.PASSED != n.get("outcome"):
            continue
        if "cuda" not in (b.get("device"), n.get("device")) or b.get("device") != n.get("device"):
            continue
        new_sizes = {s.get("name"): s for s in n.get("sizes") or []}
        for bs in b.get("sizes") or []:
            ns = new_sizes.get(bs.get("name"))
            if ns is None:
                continue
            (bt, bband), (nt, nband) = _side(bs), _side(ns)
            if bt is None or nt is None:
                continue
            unit, bbw = _bw(bs)
            _, nbw = _bw(ns)
            lat = change(bt, bband, nt, nband, latency, higher_is_better=False)
            thr = None
            if bbw is not None and nbw is not None:
                thr = change(bbw, _bw_band(bband, bbw, bt), nbw, _bw_band(nband, nbw, nt), throughput,
                             higher_is_better=True)
            out.append(SizeDelta(name, str(bs.get("name")), bs.get("bytes_per_rank"), bt, nt, unit, bbw, nbw, lat, thr))
    return out


def _pct(b: float | None, n: float | None) -> str:
    return "-" if b is None or n is None or not b else f"{n / b - 1:+.1%}"


def lines(ds: list[SizeDelta]) -> list[str]:
    """The per-size table of `kernelbench compare` (and --kb-compare): candidate latency and bandwidth."""
    from .persize import human_bytes
    if not ds:
        return ["per size: no size timed on GPUs in both runs"]
    head = ("item", "size", "bytes", "base us", "new us", "latency", "base GB/s", "new GB/s", "bandwidth", "change")
    rows = [head]
    for d in ds:
        bw = lambda x: "-" if x is None else f"{x:.1f}"      # noqa: E731
        marks = [f"latency {d.latency}" if d.latency in ("regression", "improvement") else "",
                 f"{d.unit} {d.throughput}" if d.throughput in ("regression", "improvement") else ""]
        mark = ", ".join(filter(None, marks)).replace("regression", "REGRESSION") or "noise"
        us = lambda x: "-" if x is None else f"{x * 1e6:.1f}"      # noqa: E731
        rows.append((d.item, d.size, human_bytes(d.nbytes), us(d.base_s), us(d.new_s),
                     _pct(d.base_s, d.new_s), bw(d.base_bw), bw(d.new_bw),
                     (f"{d.unit} " if d.unit else "") + _pct(d.base_bw, d.new_bw), mark))
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
