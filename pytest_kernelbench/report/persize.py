"""--kb-per-size: one row per item and size, in the units of nccl-tests. Every number is a key of
the item's record (metrics/devnums.py adds the developer's ones), so the table and the JSON agree:

    size                bytes_per_rank (nccl-tests' S, the bytes of a rank's larger buffer)
    ref/cand med, p99   timing.<side>.median_s / p99_s over the rounds (each round: max over ranks)
    algbw, busbw        algbw_GBps / busbw_GBps (GB/s = 1e9 B/s; busbw where problem.yaml declares busbw)
    speedup [band]      speedup and band of the size (GPU runs; CPU times are no speed)
    roof%               roofline.candidate
    vs NAME, best       --kb-baselines: vs.<NAME> (the candidate's paired speedup against that baseline, timed
                        in the same rounds; the speedup column is against the reference) and best_backend,
                        named by its label (problem.yaml reference_label, baselines.<NAME>.label)
"""
from __future__ import annotations

from ..protocol import Outcome

HEAD = ("problem", "W", "size", "bytes", "ref med us", "ref p99 us", "cand med us", "cand p99 us",
        "algbw GB/s ref/cand", "busbw GB/s ref/cand", "speedup [band]", "roof%")


def human_bytes(n: int | float | None) -> str:
    """nccl-tests' -b/-e spelling: 8K, 256M, 1G (binary multiples), else plain bytes."""
    if n is None:
        return "-"
    n = int(n)
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def _us(t: dict | None, key: str) -> str:
    value = (t or {}).get(key)
    return "-" if value is None else f"{value * 1e6:.1f}"


def _pair(d: dict | None) -> str:
    if not d:
        return "-"
    return "/".join("-" if d.get(k) is None else _gbps(d[k]) for k in ("reference", "candidate"))


def _gbps(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.3g}"      # CPU and tiny sizes: digits that are not all 0


def _speedup(s: dict) -> str:
    if s.get("speedup") is None:
        return "-"
    band = s.get("band")
    return f"{s['speedup']:.2f}x" + (f" [{band[0]:.2f}-{band[1]:.2f}]" if band else "")


def baseline_names(items: list[dict]) -> list[str]:
    """The baselines any passed item timed, in the order first met: one "vs NAME" column each."""
    names: dict[str, None] = {}
    for i in items:
        if i.get("outcome") == Outcome.PASSED:
            for s in i.get("sizes") or []:
                names.update(dict.fromkeys(s.get("vs") or {}))
    return list(names)


def _vs(s: dict, name: str) -> str:
    value = (s.get("vs") or {}).get(name)
    return "-" if value is None else f"{value:.2f}x"


def _best(item: dict, s: dict) -> str:
    best = s.get("best_backend")
    if not best:
        return "-"
    said = item.get("baselines") or {}
    return str(said.get("reference_label") or best) if best == "reference" else str((said.get("timed") or {}).get(best) or best)


def rows(items: list[dict], names: list[str] | None = None) -> list[tuple[str, ...]]:
    """The table's rows (no header): passed items with timed sizes, by problem then size order;
    `names`: the baselines' "vs" columns and the "best" one (none: no such columns)."""
    out: list[tuple[str, ...]] = []
    for i in items:
        if i.get("outcome") != Outcome.PASSED:
            continue
        name = str(i.get("problem") or i.get("nodeid")) + (f" #{i['sample']}" if i.get("sample") is not None else "")
        for s in i.get("sizes") or []:
            timing = s.get("timing") or {}
            if not timing:
                continue
            roof = (s.get("roofline") or {}).get("candidate")
            out.append((name, str(i.get("world_size") or "-"), str(s.get("name")), human_bytes(s.get("bytes_per_rank")),
                        _us(timing.get("reference"), "median_s"), _us(timing.get("reference"), "p99_s"),
                        _us(timing.get("candidate"), "median_s"), _us(timing.get("candidate"), "p99_s"),
                        _pair(s.get("algbw_GBps")), _pair(s.get("busbw_GBps")), _speedup(s),
                        "-" if roof is None else f"{roof * 100:.0f}%")
                       + ((*(_vs(s, n) for n in names), _best(i, s)) if names else ()))
    return out


def table(items: list[dict]) -> list[str]:
    """The per-size view's lines; a note when no item has a timed size."""
    from . import latest_by_item, natural_key
    items = sorted(latest_by_item(items), key=lambda i: (natural_key(i.get("problem") or ""), i.get("sample") or 0))
    names = baseline_names(items)
    body = rows(items, names)
    if not body:
        return ["per size: no passed item with timed sizes (--kb-timing=on on a passed item gives them)"]
    head = HEAD + ((*(f"vs {n}" for n in names), "best") if names else ())
    table_rows = [head, *body]
    widths = [max(len(r[c]) for r in table_rows) for c in range(len(head))]
    lines = ["  ".join(cell.rjust(w) if c >= 3 else cell.ljust(w) for c, (cell, w) in enumerate(zip(r, widths))).rstrip()
             for r in table_rows]
    if any(i.get("device") == "cpu" for i in items):
        lines.append("(cpu: gloo times exercise the timing protocol; they are no speed and no bandwidth of a GPU)")
    untimed = sorted({f"{i.get('problem')}: {', '.join((i.get('baselines') or {}).get('left_out') or {})}"
                      for i in items if (i.get("baselines") or {}).get("left_out") and not (i["baselines"].get("timed"))})
    if untimed:
        lines.append(f"(baselines not timed: {'; '.join(untimed)}; --kb-baselines=all or NAME,NAME times them beside "
                     "the reference, each a \"vs NAME\" column)")
    return lines
