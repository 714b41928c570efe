"""The communication-aware roofline: harness.cost() work over the machine's ceilings.

    t_roof = max(messages x latency + max(link_bytes / link_bw, inter_node_bytes / inter_node_bw),
                 hbm_bytes / hbm_bw, flops / peak_flops)

per GPU. `link_bytes` cross the links inside a node (NVLink); a multi-node problem's cost() gives
the bytes each GPU sends or receives through its NIC apart, as `inter_node_bytes` (its cost()
takes `nodes=`), over the inter-node bandwidth per GPU (measured on the cluster, else the
published NIC figure: spec/hardware.py). The two link terms overlap (separate engines, and a
pipelined hierarchical algorithm keeps both busy), so the larger bounds. A cost() without
`inter_node_bytes` (every one-node problem) reads as before. `messages` is the number of dependent communication steps the problem needs at the
least (cost() gives it where that is more than one, e.g. a count exchange before the payload;
any problem that moves link bytes needs one); `latency` is the one-way latency of a flag written
to a peer's memory, measured by a device-initiated ping-pong (calibrate.py), else the published
figure. Without the latency term a latency-bound problem read 0-2 % whatever its kernel did.
roofline fraction = t_roof / t_measured; above SUSPECT it is faster than physics allows, which
means a cheat or a wrong cost model, and is flagged.
"""
from __future__ import annotations

from . import geomean

SUSPECT = 1.05


def messages(cost: dict) -> float:
    """Dependent communication steps: cost()'s figure, else one wherever bytes cross a link."""
    given = cost.get("messages")
    if given is not None:
        return float(given)
    moved = float(cost.get("link_bytes", 0) or 0) + float(cost.get("inter_node_bytes", 0) or 0)
    return 1.0 if moved > 0 else 0.0


def roof_terms(cost: dict, ceilings: dict) -> dict[str, float]:
    """Each bound in seconds: latency (messages x latency), link (intra-node bytes / bandwidth),
    inter_node (NIC bytes / inter-node bandwidth), hbm, flops; only those the cost and the
    machine's ceilings both give."""
    terms: dict[str, float] = {}
    lat, msgs = ceilings.get("latency_s"), messages(cost)
    if lat and msgs > 0:
        terms["latency"] = msgs * float(lat)
    for name, work, ceiling in (("link", "link_bytes", "link_bw"), ("inter_node", "inter_node_bytes", "inter_node_bw"),
                                ("hbm", "hbm_bytes", "hbm_bw"), ("flops", "flops", "peak_flops")):
        w, c = float(cost.get(work, 0) or 0), ceilings.get(ceiling)
        if w > 0 and c:
            terms[name] = w / c
    return terms


def roof(cost: dict, ceilings: dict) -> tuple[float | None, str | None]:
    """t_roof in seconds and what bounds it: latency, link, inter_node, hbm or flops (for the
    communication sum, whichever of its parts is larger); (None, None) without ceilings (CPU runs).
    Latency and link time add up (a message's first byte arrives after the latency, its last
    after the bytes); the intra- and inter-node links overlap each other; the rest overlap."""
    terms = roof_terms(cost, ceilings) if ceilings else {}
    if not terms:
        return None, None
    link, inter = terms.get("link", 0.0), terms.get("inter_node", 0.0)
    wire, wire_name = (inter, "inter_node") if inter > link else (link, "link")
    comm = terms.get("latency", 0.0) + wire
    hbm, flops = terms.get("hbm", 0.0), terms.get("flops", 0.0)
    if comm >= max(hbm, flops):
        return comm, "latency" if terms.get("latency", 0.0) >= wire else wire_name
    return (hbm, "hbm") if hbm >= flops else (flops, "flops")


def roof_time(cost: dict, ceilings: dict) -> float | None:
    return roof(cost, ceilings)[0]


def bound(cost: dict, ceilings: dict) -> str | None:
    return roof(cost, ceilings)[1]


def fraction(t_roof: float | None, t: float | None) -> float | None:
    if not t_roof or not t:
        return None
    return t_roof / t


def annotate(sizes: list[dict], ceilings: dict) -> dict:
    """Add roof_s, its bound and the roofline fractions to each size record (which carries 'cost'
    and 'timing'); return the per-item GM fractions and the suspect flag."""
    ref_f, cand_f, suspect = [], [], False
    for s in sizes:
        cost = s.get("cost") or {}
        t_roof, s["roof_bound"] = roof(cost, ceilings)
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
