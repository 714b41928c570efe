"""Reports as the command reads them (a JSON report, or the JSONL of a run that was cut short) and
the leaderboard's entries: one per model or candidate on one machine."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .. import metrics, report


class ReportError(Exception):
    """A file that is not a readable kernelbench report: one line for the user."""


def load(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ReportError(f"{path}: no such report")
    if path.suffix == ".jsonl":
        lines = report.read_jsonl(path)
        if not lines:
            raise ReportError(f"{path}: no item lines")
        cfg: dict = next((r["run_config"] for r in lines if r.get("run_config")), {})
        return {"schema_version": None, "machine": {}, "items": lines, "path": str(path),
                "config": {"run_id": lines[0].get("run_id"), "settings": cfg, "identity": cfg}}
    try:
        doc = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise ReportError(f"{path}: not a kernelbench report (no item list)")
    doc["path"] = str(path)
    return doc


def items(doc: dict) -> list[dict]:
    """One record per item and sample (a model's sample: its best round)."""
    return report.latest_by_item(doc["items"])


def settings(doc: dict) -> dict:
    config = doc.get("config") or {}
    return config.get("settings") or config.get("identity") or {}


def candidate_name(doc: dict) -> str:
    """The model, else what chose the candidates (reference self-check, shipped solutions, a
    directory)."""
    s = settings(doc)
    recs = items(doc)
    models = {(i.get("candidate") or {}).get("model") for i in recs} - {None}
    if s.get("model") or len(models) == 1:
        return s.get("model") or models.pop()
    if s.get("solutions"):
        return "dir:" + Path(s["solutions"]).name
    labels = sorted({(i.get("candidate") or {}).get("label") for i in recs} - {None})
    mode = s.get("candidate") or "auto"
    if labels == ["self-check"]:
        return "reference (self-check)"
    if mode.startswith("shipped") and labels:
        return "shipped (" + ", ".join(lb.partition(":")[2] or lb for lb in labels) + ")"
    return f"{mode}: " + ", ".join(labels) if labels else mode


def machine_name(doc: dict, recs: list[dict]) -> str:
    counted = [i for i in recs if i.get("outcome") in metrics.COUNTED]
    devices = {i.get("device") for i in counted} - {None}
    worlds = sorted({i.get("world_size") for i in counted} - {None})
    m = doc.get("machine") or {}
    if devices == {"cpu"} or (not devices and not m.get("gpu_count")):
        where = "CPU (gloo)"
    else:
        where = f"{m.get('gpu_count')}x {m['gpu_model']}" if m.get("gpu_model") else "GPU"
    return where + (f", W={'/'.join(map(str, worlds))}" if worlds else "")


@dataclass
class Entry:
    """A leaderboard row's items: one model or candidate on one machine, over one or more reports."""
    name: str
    machine: str
    items: list[dict] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def entries(docs: list[dict]) -> list[Entry]:
    """Reports of the same model/candidate and machine add up (a run split by category, say); a
    later report's record of the same problem and sample replaces an earlier one."""
    found: dict[tuple[str, str], Entry] = {}
    for doc in docs:
        recs = items(doc)
        key = (candidate_name(doc), machine_name(doc, recs))
        entry = found.setdefault(key, Entry(*key))
        entry.sources.append(doc.get("path") or "?")
        merged = {(i.get("problem"), i.get("sample")): i for i in entry.items}
        merged.update({(i.get("problem"), i.get("sample")): i for i in recs})
        entry.items = list(merged.values())
    return list(found.values())
