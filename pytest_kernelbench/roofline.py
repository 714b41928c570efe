"""The communication-aware roofline: harness.cost() work over the machine's ceilings.

t_roof = max(link_bytes / link_bw, hbm_bytes / hbm_bw, flops / peak_flops), per GPU.
roofline fraction = t_roof / t_measured; above SUSPECT it is faster than physics allows, which
means a cheat or a wrong cost model, and is flagged.
"""
from __future__ import annotations

from .metrics import geomean

SUSPECT = 1.05


def roof_time(cost: dict, ceilings: dict) -> float | None:
    """Seconds; None when the machine has no ceilings (CPU runs)."""
    if not ceilings:
        return None
    terms = []
    for work, ceiling in (("link_bytes", "link_bw"), ("hbm_bytes", "hbm_bw"), ("flops", "peak_flops")):
        w, c = float(cost.get(work, 0) or 0), ceilings.get(ceiling)
        if w > 0 and c:
            terms.append(w / c)
    return max(terms) if terms else None


def fraction(t_roof: float | None, t: float | None) -> float | None:
    if not t_roof or not t:
        return None
    return t_roof / t


def annotate(sizes: list[dict], ceilings: dict) -> dict:
    """Add roof_s and roofline fractions to each size record (which carries 'cost' and 'timing');
    return the per-item GM fractions and the suspect flag."""
    ref_f, cand_f, suspect = [], [], False
    for s in sizes:
        t_roof = roof_time(s.get("cost") or {}, ceilings)
        timing = s.get("timing") or {}
        s["roof_s"] = t_roof
        fr = fraction(t_roof, (timing.get("reference") or {}).get("median_s"))
        fc = fraction(t_roof, (timing.get("candidate") or {}).get("median_s"))
        s["roofline"] = {"reference": fr, "candidate": fc}
        if fc is not None and fc > SUSPECT:
            s["suspect"] = True
            suspect = True
        ref_f.append(fr)
        cand_f.append(fc)
    return {"roofline": {"reference": geomean(ref_f), "candidate": geomean(cand_f)}, "suspect": suspect}
