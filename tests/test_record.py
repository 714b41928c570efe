"""The item record is typed (report/record.py::ItemRecord) and a dict only at the JSON boundary:
the dicts it gives are the report's items as they have always been, and reports read back
(committed ones included) come out as they went in."""
from __future__ import annotations

import json
from pathlib import Path

from pytest_kernelbench.protocol import Failure, Outcome
from pytest_kernelbench.report.record import ItemRecord
from pytest_kernelbench.session import base_record

REPO = Path(__file__).resolve().parent.parent
NODE = "problems/p2p/ring/problem.yaml::test_problem[p2p/ring]"


def _committed_items() -> list[dict]:
    items = []
    # the committed reports (a local run's reports/<run-id>* may hold anything, lock files included)
    for path in sorted(p for p in (REPO / "reports" / "baselines").rglob("*") if p.suffix in (".json", ".jsonl")):
        text = path.read_text()
        if path.suffix == ".jsonl":
            items += [json.loads(ln) for ln in text.splitlines() if ln.strip()]
        else:
            doc = json.loads(text)
            items += doc.get("items", []) if isinstance(doc, dict) else []
    return [i for i in items if isinstance(i, dict) and "nodeid" in i]


def test_committed_reports_read_back_unchanged():
    items = _committed_items()
    assert len(items) > 50
    for item in items:
        back = ItemRecord.from_dict(item).to_dict()
        assert back == item
        assert json.dumps(back, sort_keys=True) == json.dumps(item, sort_keys=True)


def test_a_record_has_a_key_only_once_it_was_given():
    rec = base_record(None, None, NODE)
    assert rec.to_dict() == {"nodeid": NODE, "problem": "p2p/ring", "title": None, "category": "p2p",
                             "parallelism": [], "difficulty": None, "libraries": [], "sample": None,
                             "candidate": None}
    rec.end(Outcome.SKIPPED, message="no GPU")
    assert rec.to_dict()["outcome"] == "skipped" and "failure" not in rec.to_dict()
    rec = base_record(None, None, NODE)
    rec.end(Outcome.FAILED, Failure.TIMEOUT, "too slow")
    d = rec.to_dict()
    assert (d["outcome"], d["failure"], d["message"]) == ("failed", "timeout", "too slow")
    assert "score" not in d and "verdict" not in d        # a failed item has no speed keys
    rec.score = None
    assert rec.to_dict()["score"] is None


def test_unknown_keys_of_a_report_survive_and_come_last():
    item = {"nodeid": NODE, "problem": "p2p/ring", "outcome": "passed", "from_the_future": {"x": 1},
            "run_id": "r1"}
    back = ItemRecord.from_dict(item).to_dict()
    assert back == item and list(back)[-2:] == ["from_the_future", "run_id"]
    assert "title" not in back        # an old record without an identity key stays without it
