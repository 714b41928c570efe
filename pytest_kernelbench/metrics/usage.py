"""Token and USD totals of a run whose candidates a model wrote. Pure functions over item records
(each kept item's record["cost"] covers every round of its sample), for the JSON aggregates and
the terminal summary."""
from __future__ import annotations


def totals(items: list[dict]) -> dict | None:
    """Sum of the items' costs, or None when no item came from a model."""
    costs: list[dict] = [c for c in (i.get("cost") for i in items) if isinstance(c, dict)]
    if not costs:
        return None
    out: dict = {"calls": 0, "cached_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "usd": 0.0, "usd_known": True}
    for c in costs:
        for k in ("calls", "cached_calls", "prompt_tokens", "completion_tokens"):
            out[k] += c.get(k) or 0
        out["usd"] += c.get("usd") or 0.0
        out["usd_known"] = out["usd_known"] and c.get("usd_known", True)
    out["per_item_usd"] = out["usd"] / len(costs) if costs else None
    return out


def summary_line(t: dict | None) -> str | None:
    if not t:
        return None
    usd = f"${t['usd']:.4f}" + ("" if t["usd_known"] else " (some calls unpriced)")
    return (f"model cost: {usd}, {t['prompt_tokens']} prompt + {t['completion_tokens']} completion tokens, "
            f"{t['calls']} calls ({t['cached_calls']} from cache)")
