"""Reports as the command reads them (a JSON report, or the JSONL of a run that was cut short) and
the leaderboard's entries: one per model or candidate on one machine."""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .. import metrics, report
from ..protocol import Outcome


class ReportError(Exception):
    """A file that is not a readable kernelbench report: one line for the user."""

    def __init__(self, path: str | Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.reason = reason


def load(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ReportError(path, "no such report")
    if path.suffix == ".jsonl":
        lines = report.read_jsonl(path)
        if not lines:
            raise ReportError(path, "no item lines")
        cfg: dict = next((r["run_config"] for r in lines if r.get("run_config")), {})
        return {"schema_version": None, "machine": {}, "items": lines, "path": str(path),
                "config": {"run_id": lines[0].get("run_id"), "settings": cfg, "identity": cfg}}
    try:
        doc = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ReportError(path, f"not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise ReportError(path, "not a kernelbench report (no item list)")
    doc["path"] = str(path)
    return doc


def items(doc: dict) -> list[dict]:
    """One record per item and sample (a model's sample: its best round)."""
    return report.latest_by_item(doc["items"])


def settings(doc: dict) -> dict:
    config = doc.get("config") or {}
    return config.get("settings") or config.get("identity") or {}


def candidate_key(doc: dict) -> str:
    """What chose the candidates, as the run was asked (the model, the folder, the --kb-candidate
    mode): a row's key. Never the labels the items happened to use, which vary with the selection
    and the machine (`auto` runs a shipped solution where one runs here, else the self-check)."""
    s = settings(doc)
    recs = items(doc)
    models = {str(m) for i in recs if (m := (i.get("candidate") or {}).get("model"))}
    if s.get("model") or len(models) == 1:
        return str(s.get("model") or models.pop())
    if s.get("solutions"):
        return "dir:" + Path(s["solutions"]).name
    if s.get("candidate"):
        return str(s["candidate"])
    # a report without its settings: only a self-check says what it was
    return "reference" if _labels(recs) == ["self-check"] else "auto"


def _labels(recs: list[dict]) -> list[str]:
    return sorted({str(lb) for i in recs if (lb := (i.get("candidate") or {}).get("label"))})


def display_name(key: str, recs: list[dict]) -> str:
    """The row's name: its key, with the candidates its items used where the mode picks them."""
    labels = _labels(recs)
    if key == "reference":
        return "reference (self-check)"
    if key == "shipped" and labels:
        return "shipped (" + ", ".join(lb.partition(":")[2] or lb for lb in labels) + ")"
    if key == "auto" and labels:
        return "auto (" + ", ".join(labels) + ")"
    return key


def counted(recs: list[dict]) -> list[dict]:
    return [i for i in recs if i.get("outcome") in metrics.COUNTED]


def machine_name(doc: dict, recs: list[dict]) -> str:
    done = counted(recs)
    devices = {i.get("device") for i in done} - {None}
    worlds = sorted({int(w) for i in done if (w := i.get("world_size")) is not None})
    m = doc.get("machine") or {}
    if devices == {"cpu"} or (not devices and not m.get("gpu_count")):
        where = "CPU (gloo)"
    else:
        where = f"{m.get('gpu_count')}x {m['gpu_model']}" if m.get("gpu_model") else "GPU"
    # ranks that shared GPUs (--kb-oversubscribe) measured no speed: their row is never one with timed
    # records of the same candidate and machine, and says so
    shared = sum(1 for i in done if metrics.is_shared(i))
    tag = "" if not shared else ", shared GPU" if shared == len(done) else f", {shared} of {len(done)} on a shared GPU"
    return where + (f", W={'/'.join(map(str, worlds))}" if worlds else "") + tag


@dataclass
class Entry:
    """A leaderboard row's items: one model or candidate on one machine, over one or more reports
    (in the order given: a later report's record of the same problem and sample replaces an
    earlier one's, and `replaced` keeps count of it)."""
    key: str
    machine: str
    items: list[dict] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    origin: dict[tuple, str] = field(default_factory=dict)         # item -> the report its record is from
    read: Counter = field(default_factory=Counter)                  # report -> its records
    replaced: defaultdict = field(default_factory=lambda: defaultdict(Counter))   # earlier -> {later: n}
    incomplete: dict[str, int] = field(default_factory=dict)     # interrupted report -> items it never ran

    @property
    def name(self) -> str:
        return display_name(self.key, self.items) + (" (incomplete run)" if self.incomplete else "")

    def add(self, source: str, recs: list[dict]) -> None:
        self.sources.append(source)
        self.read[source] += len(recs)
        merged = {_ident(i): i for i in self.items}
        for rec in recs:
            ident = _ident(rec)
            before = self.origin.get(ident)
            if before is not None and before != source:
                self.replaced[before][source] += 1
            merged[ident] = rec
            self.origin[ident] = source
        self.items = list(merged.values())

    def kept(self, source: str) -> int:
        return sum(1 for s in self.origin.values() if s == source)


def _ident(rec: dict) -> tuple:
    return rec.get("problem"), rec.get("sample")


def entries(docs: list[dict]) -> list[Entry]:
    """Reports of the same model/candidate and machine add up (a run split by category, say); a
    later report's record of the same problem and sample replaces an earlier one."""
    found: dict[tuple[str, str], Entry] = {}
    for doc in docs:
        recs = items(doc)
        key = (candidate_key(doc), machine_name(doc, recs))
        entry = found.setdefault(key, Entry(*key))
        entry.add(doc.get("path") or "?", recs)
        if doc.get("interrupted"):      # a run cut short: never read as a whole one
            entry.incomplete[doc.get("path") or "?"] = int(doc["interrupted"].get("left") or 0)
    return list(found.values())


@dataclass
class Board:
    """What the leaderboard is made of: its entries, and each file that makes no row, with why."""
    entries: list[Entry]
    unused: list[tuple[str, str]]
    paths: list[str]


def board(paths: list[str | Path]) -> Board:
    """Every report among `paths`, in their order. A file that is not a report (a calibration
    record beside the reports, say) or a run that counted no item (all skipped) makes no row:
    it is listed with the reason, and the rest of the board stands."""
    docs, unused = [], []
    names = [str(Path(p)) for p in paths]          # as load() names them
    for path in names:
        try:
            doc = load(path)
        except ReportError as e:
            unused.append((path, e.reason))
            continue
        recs = items(doc)
        if not counted(recs):
            skipped = sum(1 for i in recs if i.get("outcome") == Outcome.SKIPPED)
            unused.append((path, f"no counted item ({skipped} skipped)"))
            continue
        docs.append(doc)
    return Board(entries(docs), unused, names)
