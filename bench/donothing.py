"""What a do-nothing model scores: the reference handed back as the answer to every problem (the
template left as it is, for native problems), as a machine of 4 GPUs would count it.

    python -m bench.donothing CPU_REPORT.json GPU_SELFCHECK.json [--md OUT.md]

CPU_REPORT: a CPU run of the whole suite with `--kb-solutions` holding every problem's reference
(and every native template), which says what becomes of a copy on each problem (passed,
forbidden_call, reference_copy, ...). GPU_SELFCHECK: a recorded self-check on GPUs, whose per-item
score and verdict are what a copy that passes would read (it is the reference, timed against
itself). Problems the CPU run could not judge are counted as the GPU run would: a native template
fails (its stub is a mismatch by construction); a rewrite problem with no legal CPU candidate
fails, its reference's transport being forbidden there (or, once copies are detected, as a copy).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from pytest_kernelbench import metrics

MOVED = {"p2p/ring_attention": "fusion/ring_attention", "p2p/zigzag_ring_attention": "fusion/zigzag_ring_attention"}


def _family(pid: str) -> str | None:
    path = Path(__file__).resolve().parent.parent / "problems" / pid / "problem.yaml"
    return yaml.safe_load(path.read_text()).get("family") if path.is_file() else None


def projected(cpu: dict, gpu: dict) -> list[dict]:
    timed = {MOVED.get(i["problem"], i["problem"]): i for i in gpu["items"] if i.get("outcome") == "passed"}
    detects = any(i.get("failure") == "reference_copy" for i in cpu["items"])
    out = []
    for i in cpu["items"]:
        rec = {k: i.get(k) for k in ("problem", "category", "parallelism", "difficulty", "libraries", "family",
                                     "unscored")}
        rec["problem"] = MOVED.get(rec["problem"], rec["problem"])
        rec["family"] = rec["family"] or _family(rec["problem"])     # a report older than families
        if i["outcome"] == "passed":
            t = timed.get(rec["problem"])
            rec.update(outcome="passed", score=t and t.get("score"), verdict=t and t.get("verdict"))
        elif i["outcome"] in ("failed", "error"):
            rec.update(outcome=i["outcome"], failure=i.get("failure"))
        elif "no legal candidate on CPU" in (i.get("message") or ""):
            rec.update(outcome="failed", failure="reference_copy" if detects else "forbidden_call")
        else:                       # needs GPUs: a native problem, whose untouched template fails
            rec.update(outcome="failed", failure="mismatch")
        out.append(rec)
    return out


def fmt(x: float | None, pattern: str = "{:.3f}") -> str:
    return "-" if x is None else pattern.format(x)


def lines(cpu: dict, gpu: dict, label: str) -> list[str]:
    items = projected(cpu, gpu)
    a = metrics.aggregate(items)
    cpu_a = cpu["aggregates"]
    missing = [i["problem"] for i in items if i["outcome"] == "passed" and i.get("score") is None]
    fam = a.get("family_weighted") or {}
    if not a["passed"]:         # nothing passed: no speed to aggregate, but every score is 0
        a.update(pass_x_gm=0.0, pass_good=0.0, fast_1=0.0)
        fam["pass_x_gm"] = 0.0
    return [
        f"| {label} | {cpu_a['passed']}/{cpu_a['total']} | {cpu_a.get('reference_copies', 0)} | "
        f"{a['passed']}/{a['total']} | {fmt(a['pass_x_gm'])} | {fmt(a['pass_good'], '{:.1%}')} | "
        f"{fmt(a['fast_1'], '{:.1%}')} | {fmt(fam.get('pass_x_gm'))} |"
        + (f" (no recorded score: {', '.join(missing)})" if missing else "")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cpu", nargs="+", help="CPU do-nothing report(s), each LABEL=PATH")
    ap.add_argument("--gpu", required=True, help="recorded GPU self-check report")
    ap.add_argument("--md", help="write the table here too")
    args = ap.parse_args(argv)
    gpu = json.loads(Path(args.gpu).read_text())
    table = ["| run | CPU: counted passes | CPU: reference copies | 4 GPUs: passes | Pass x GM | PASS+Good | "
             "fast_1 | Pass x GM, families as one |",
             "|---|---|---|---|---|---|---|---|"]
    for spec in args.cpu:
        label, _, path = spec.partition("=")
        table += lines(json.loads(Path(path).read_text()), gpu, label)
    print("\n".join(table))
    if args.md:
        Path(args.md).write_text("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
