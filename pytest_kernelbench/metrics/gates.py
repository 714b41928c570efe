"""Gates in a developer's units: --kb-min-busbw and --kb-max-latency. Each option is a comma
list of terms `[ITEM][@SIZE]=LIMIT` or a bare `LIMIT` (every item):

    ITEM    a glob over problem ids (collective/all_reduce, collective/*); default every item
    SIZE    a size name (tiny, large) or nccl-tests' size S with K/M/G (8K, 256M); default see below
    LIMIT   busbw: GB/s (1e9 B/s); latency: a time, us by default (20, 20us, 1.5ms, 0.002s)

--kb-min-busbw without @SIZE gates the item's mean busbw over its sizes, nccl-tests' "Avg bus
bandwidth" (NCCL_TESTS_MIN_BW); with @SIZE, that size's. --kb-max-latency gates the candidate's
median time per call at each size it names (without @SIZE: every size). Only passed GPU items with
timed sizes are gated (a failed item already fails; CPU times are no speed). Pure functions over
records: the pytest side marks each item's misses (record `gates`) and fails the session.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from ..protocol import Outcome

KINDS = ("busbw", "latency")
_UNITS = {"": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_BYTES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass(frozen=True)
class Gate:
    kind: str                  # busbw | latency
    limit: float               # GB/s, or seconds
    item: str = "*"
    size: str | None = None    # a size name, or S spelled with K/M/G

    def describe(self) -> str:
        where = ("" if self.item == "*" else self.item) + (f"@{self.size}" if self.size else "")
        bound = f">= {self.limit:g} GB/s" if self.kind == "busbw" else f"<= {self.limit * 1e6:g} us"
        return f"{self.kind}{' ' + where if where else ''} {bound}"


def parse_bytes(text: str) -> int | None:
    """8K, 256M, 1G, 4096 -> bytes (binary multiples, nccl-tests' -b/-e); None if not such a size."""
    m = re.fullmatch(r"(\d+)([KMG]?)B?", text.strip(), re.IGNORECASE)
    return int(m.group(1)) * _BYTES[m.group(2).upper()] if m else None


def parse(text: str | None, kind: str) -> list[Gate]:
    """The option's gates; ValueError names the bad term."""
    out = []
    for term in filter(None, (t.strip() for t in (text or "").split(","))):
        where, _, value = term.rpartition("=")
        item, _, size = where.partition("@")
        if kind == "busbw":
            try:
                limit = float(value)
            except ValueError:
                raise ValueError(f"{term!r}: expected [ITEM][@SIZE]=GB/s, e.g. collective/all_reduce@256M=300") from None
        else:
            m = re.fullmatch(r"([0-9.]+(?:e-?\d+)?)\s*(us|ms|s)?", value.strip())
            if not m:
                raise ValueError(f"{term!r}: expected [ITEM][@SIZE]=TIME (us by default; ms, s), e.g. *@8K=20us")
            limit = float(m.group(1)) * _UNITS[m.group(2) or ""]
        if not limit > 0:
            raise ValueError(f"{term!r}: the limit must be > 0")
        if where and not (item or size):
            raise ValueError(f"{term!r}: name an item, a size (@SIZE) or neither")
        out.append(Gate(kind, limit, item or "*", size or None))
    return out


def _sizes_of(item: dict, size: str | None) -> list[dict]:
    timed = [s for s in item.get("sizes") or [] if (s.get("timing") or {}).get("candidate")]
    if size is None:
        return timed
    nbytes = parse_bytes(size)
    return [s for s in timed if s.get("name") == size or (nbytes is not None and s.get("bytes_per_rank") == nbytes)]


def misses(item: dict, gates: list[Gate]) -> list[str]:
    """Each gate this item misses, as one line (the item's, its size, the value and the bound)."""
    if item.get("outcome") != Outcome.PASSED or item.get("device") != "cuda":
        return []
    out = []
    name = item.get("problem") or ""
    for g in gates:
        if not fnmatch.fnmatchcase(name, g.item):
            continue
        sizes = _sizes_of(item, g.size)
        if g.kind == "busbw":
            found = [(s.get("busbw_GBps") or {}).get("candidate") for s in sizes]
            values = [float(v) for v in found if v is not None]
            if not values:
                continue        # no busbw declared (problem.yaml busbw), or the size did not run
            value = sum(values) / len(values)
            if value < g.limit:
                what = f"@{g.size}" if g.size else f" (mean over {len(values)} size(s))"
                out.append(f"{name}{what}: busbw {value:.1f} GB/s < {g.limit:g} GB/s")
        else:
            for s in sizes:
                t = s["timing"]["candidate"].get("median_s")
                if t is not None and t > g.limit:
                    out.append(f"{name}@{s.get('name')}: latency {t * 1e6:.1f} us > {g.limit * 1e6:g} us")
    return out


def check(items: list[dict], gates: list[Gate]) -> dict[str, list[str]]:
    """nodeid -> its misses, for the items that miss a gate."""
    found = {}
    for i in items:
        m = misses(i, gates)
        if m:
            found[i.get("nodeid") or i.get("problem") or "?"] = m
    return found
