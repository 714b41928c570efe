"""Training data from runs: one row per attempt (every sample and refinement round a run recorded)
with the problem and its metadata, the prompt the model saw, the candidate's code, the outcome and
its message, per-size times and speedups, roofline, tokens and cost. No harness text: rows are
built from a fixed list of fields (no logs, job folders or rank stacks), and every line of a
failure message that quotes the problem's harness.py is replaced, as in the refinement feedback.

jsonl always works; parquet needs pyarrow (nested fields are stored as JSON text there)."""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

from .. import report
from ..candidates import prompt as kb_prompt
from ..protocol import Outcome
from ..report import reading as reports

ROLE = re.compile(r"^<!-- (system|user|assistant) -->\n", re.M)
NESTED = ("parallelism", "libraries", "prompt", "sizes", "band", "roofline", "tokens", "sample_cost")
PYARROW_MISSING = "--format parquet needs pyarrow: pip install pyarrow (jsonl needs nothing)"


class ExportError(Exception):
    pass


def default_problems_root() -> Path:
    here = Path("problems")
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / "problems"


def attempts(path: Path) -> tuple[dict, list[dict]]:
    """The report and every attempt it recorded: a JSON report's JSONL beside it holds every
    round of every sample (the JSON keeps only each sample's best round)."""
    doc = reports.load(path)
    lines = doc["items"]
    beside = Path(path).with_suffix(".jsonl")
    if Path(path).suffix == ".json" and beside.is_file():
        lines = report.read_jsonl(beside) or lines
    latest = {(r.get("nodeid"), r.get("sample"), r.get("round")): r for r in lines}
    return doc, list(latest.values())


def parse_chat(text: str) -> list[dict]:
    """The inverse of prompt.render: the messages of a chat kept under reports/<run>/prompts/."""
    parts = ROLE.split(text)
    pairs = list(zip(parts[1::2], parts[2::2]))
    out = []
    for n, (role, content) in enumerate(pairs):
        end = "\n" if n == len(pairs) - 1 else "\n\n"
        out.append({"role": role, "content": content[:-len(end)] if content.endswith(end) else content})
    return out


def _find(recorded: str | None, run_dir: Path, what: str, problems: Path) -> Path | None:
    """A file a record names, where it was then or where it lies now (a moved report's run folder,
    a problem tree checked out elsewhere)."""
    if not recorded:
        return None
    p = Path(recorded)
    tries = [p, run_dir / what / p.name]
    if "/problems/" in recorded:
        tries.append(problems / recorded.split("/problems/", 1)[1])
    return next((t for t in tries if t.is_file()), None)


def _code(cand: dict, run_dir: Path, problems: Path) -> str | None:
    path = _find(cand.get("origin"), run_dir, "candidates", problems)
    if path is None:
        return None
    text = path.read_text(encoding="utf-8")
    sha = cand.get("sha256")
    # a file changed since the run is not the code that was measured
    return text if sha is None or hashlib.sha256(text.encode()).hexdigest() == sha else None


def _redact(text: str | None, harness: str | None) -> str | None:
    if not text:
        return text
    if harness:
        return kb_prompt.redact(text, harness)
    return "\n".join(kb_prompt.HIDDEN_LINE if "harness.py" in ln else ln for ln in text.splitlines())


def _sizes(rec: dict) -> list[dict]:
    out = []
    for s in rec.get("sizes") or []:
        t = s.get("timing") or {}
        out.append({"name": s.get("name"), "config": s.get("config"),
                    "t_ref_s": (t.get("reference") or {}).get("median_s"),
                    "t_cand_s": (t.get("candidate") or {}).get("median_s"),
                    "speedup": s.get("speedup"), "band": s.get("band"), "cpu_time_ratio": s.get("cpu_time_ratio"),
                    "roofline": s.get("roofline")})
    return out


def row(rec: dict, doc: dict, run_dir: Path, problems: Path, harness: str | None) -> dict:
    cand = rec.get("candidate") or {}
    call = rec.get("llm") or {}
    chat = _find(call.get("prompt_file"), run_dir, "prompts", problems)
    return {
        "run_id": rec.get("run_id") or (doc.get("config") or {}).get("run_id"),
        "problem": rec.get("problem"), "title": rec.get("title"), "category": rec.get("category"),
        "parallelism": rec.get("parallelism") or [], "difficulty": rec.get("difficulty"),
        "libraries": rec.get("libraries") or [], "device": rec.get("device"), "world_size": rec.get("world_size"),
        "machine": reports.machine_name(doc, [rec]),
        "model": cand.get("model") or call.get("model") or reports.settings(doc).get("model"),
        "candidate": cand.get("label"), "candidate_kind": cand.get("kind"),
        "sample": rec.get("sample"), "round": rec.get("round"), "best": rec.get("best"),
        "prompt": parse_chat(chat.read_text(encoding="utf-8")) if chat else None,
        "code": _code(cand, run_dir, problems), "code_sha256": cand.get("sha256"),
        "outcome": rec.get("outcome"), "failure": rec.get("failure"),
        "message": _redact(rec.get("message"), harness),
        "score": rec.get("score"), "band": rec.get("band"), "verdict": rec.get("verdict"),
        "speed_note": rec.get("speed"), "sizes": _sizes(rec), "roofline": rec.get("roofline"),
        "suspect": rec.get("suspect"),
        "tokens": {"prompt": call.get("prompt_tokens"), "completion": call.get("completion_tokens")} if call else None,
        "usd": call.get("usd"), "cached": call.get("cached"), "sample_cost": rec.get("cost"),
    }


def rows(paths: list, problems: Path | None = None) -> list[dict]:
    problems = problems or default_problems_root()
    out, unredacted = [], set()
    for path in paths:
        doc, recs = attempts(Path(path))
        run_dir = Path(path).with_suffix("")
        for rec in recs:
            if rec.get("outcome") == Outcome.SKIPPED:
                continue                    # nothing was attempted
            hp = problems / str(rec.get("problem")) / "harness.py"
            harness = hp.read_text(encoding="utf-8") if hp.is_file() else None
            if harness is None and rec.get("message"):
                unredacted.add(str(rec.get("problem")))
            out.append(row(rec, doc, run_dir, problems, harness))
    if unredacted:
        print(f"export: no harness.py under {problems} for {', '.join(sorted(unredacted))}: only lines naming "
              f"harness.py were dropped from their messages (give --problems)", file=sys.stderr)
    return out


def write(rows_: list[dict], path: Path, fmt: str):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        with open(path, "w", encoding="utf-8") as f:
            for r in rows_:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        return
    pa, pq = parquet_modules()
    flat = [{k: json.dumps(v) if k in NESTED else v for k, v in r.items()} for r in rows_]
    pq.write_table(pa.Table.from_pylist(flat), str(path))


def read(path: Path) -> list[dict]:
    """Rows back from an export (either format)."""
    path = Path(path)
    if path.suffix == ".parquet":
        _, pq = parquet_modules()
        return [{k: json.loads(v) if k in NESTED else v for k, v in r.items()}
                for r in pq.read_table(str(path)).to_pylist()]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def parquet_modules():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError(PYARROW_MISSING) from None
    return pa, pq
