"""The training and agent commands of `kernelbench`:

    kernelbench reward REPORT... --preset NAME [--json FILE]   rewards recomputed from stored records
    kernelbench prompt PROBLEM [--world-size W] [--device D]   the task a model sees
    kernelbench try PROBLEM FILE [--world-size W] [--json]     one evaluation; prints its feedback
    kernelbench serve [--host H] [--port P] [--token T]        the scoring service (extra 'serve')
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..protocol import Outcome
from ..report import reading as reports


def add_commands(sub: argparse._SubParsersAction) -> None:
    from ..metrics.rewards import PRESETS
    r = sub.add_parser("reward", help="rewards of a preset recomputed from stored records (retryable ones get none)")
    r.add_argument("reports", nargs="+", help="JSON reports (or JSONL); a file of evaluate()/service results too")
    r.add_argument("--preset", required=True, choices=sorted(PRESETS))
    r.add_argument("--json", help="also write one {problem, sample, disposition, preset, version, value} per record")
    r.set_defaults(run=_reward)
    p = sub.add_parser("prompt", help="print the task a model sees for PROBLEM (as --kb-model sends it)")
    _problem_args(p)
    p.set_defaults(run=_prompt)
    t = sub.add_parser("try", help="evaluate FILE as PROBLEM's candidate (the same harness as pytest) and print "
                                   "the feedback a model would get")
    _problem_args(t)
    t.add_argument("file", help="the candidate (solution.py; a native problem's template file)")
    t.add_argument("--trials", type=int)
    t.add_argument("--sizes", help="comma-separated size names")
    t.add_argument("--timing", choices=("on", "off"))
    t.add_argument("--timeout", type=float, help="the job's deadline in seconds")
    t.add_argument("--json", action="store_true", help="print the whole evaluation as JSON instead")
    t.set_defaults(run=_try)
    s = sub.add_parser("serve", help="the scoring service: a JSON API over evaluate() (pip install "
                                     "'pytest-kernelbench[serve]')")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; any other needs a token)")
    s.add_argument("--port", type=int, default=8470)
    s.add_argument("--token", help="bearer token clients must send (default: $KB_SERVE_TOKEN)")
    s.add_argument("--workers", type=int, help="evaluations at a time (default: one per GPU, else half the cores)")
    s.add_argument("--queue", type=int, default=256, help="most evaluations waiting; more get 429 (default 256)")
    s.add_argument("--problems", help="the problems/ folder (default ./problems, else the checkout's)")
    s.add_argument("--pkb", help="a ParallelKernelBench checkout (problems pkb/<N>_<name>)")
    s.set_defaults(run=_serve)


def _problem_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("problem", help="<category>/<name> (pkb/<N>_<name> with --pkb)")
    p.add_argument("--world-size", type=int)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"))
    p.add_argument("--problems", help="the problems/ folder (default ./problems, else the checkout's)")
    p.add_argument("--pkb", help="a ParallelKernelBench checkout")


def _records(paths: list[str]) -> list[dict]:
    """Records of reports, JSONL logs, or files of evaluations (each {"record": ...})."""
    out: list[dict] = []
    for path in paths:
        text = Path(path).read_text()
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and "items" in doc:
            out += reports.items(reports.load(path))
            continue
        rows = doc if isinstance(doc, list) else [json.loads(ln) for ln in text.splitlines() if ln.strip()]
        out += [r.get("record", r) for r in rows if isinstance(r, dict)]
    return out


def _reward(a: argparse.Namespace) -> int:
    from ..metrics import rewards
    recs = _records(a.reports)
    if not recs:
        raise ValueError("no record in " + ", ".join(a.reports))
    print("\n".join(rewards.table_lines(recs, a.preset)))
    if a.json:
        rows = [{"problem": r.get("problem"), "sample": r.get("sample"), "round": r.get("round"),
                 "disposition": rewards.components(r)["disposition"], **rewards.reward_entry(r, a.preset)} for r in recs]
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def _prompt(a: argparse.Namespace) -> int:
    from ..candidates import prompt
    from ..scoring.evaluate import find_problem, settings_for
    from ..session import KBSession, Skip
    from ..spec.problem import ProblemError
    from ..spec import hardware, shapes
    try:
        problem = find_problem(a.problem, a.problems, a.pkb)
    except ProblemError as e:
        raise ValueError(str(e)) from None
    settings, _ = settings_for({"world_size": a.world_size, "device": a.device})
    # only placed: the fork launcher starts nothing until a job runs
    session = KBSession(settings, Path.cwd(), "prompt", "prompt", hardware.machine_info(), Path(os.devnull))
    try:
        placement = session.place(problem)
    except Skip as e:
        raise ValueError(f"{problem.id} does not run here: {e}") from None
    probed = shapes.probe(problem, placement.world_size, Path.cwd() / ".kb-cache" / "shapes")
    print(prompt.render(prompt.messages(problem, placement, session.machine, probed, settings.compile_timeout,
                                        settings.timeout)), end="")
    return 0


def _try(a: argparse.Namespace) -> int:
    from ..scoring import evaluate
    options = {"world_size": a.world_size, "device": a.device, "trials": a.trials, "timeout": a.timeout,
               "sizes": a.sizes, "timing": a.timing}
    where = {k: v for k, v in (("problems_dir", a.problems), ("pkb", a.pkb)) if v}
    ev = evaluate(a.problem, Path(a.file).read_text(), **where, **{k: v for k, v in options.items() if v is not None})
    if a.json:
        print(json.dumps(ev.to_dict(), indent=1, default=str))
    else:
        rec = ev.record
        print(f"{ev.problem}: {rec.outcome}" + (f" ({rec.failure})" if rec.failure else "")
              + f", disposition {ev.disposition}\n")
        print(ev.feedback)
    return 0 if ev.record.outcome == Outcome.PASSED else 1


def _serve(a: argparse.Namespace) -> int:
    from ..scoring import service
    token = a.token or os.environ.get("KB_SERVE_TOKEN")
    return service.serve(a.host, a.port, token, workers=a.workers, queue_limit=a.queue, problems_dir=a.problems,
                         pkb=a.pkb, out=sys.stderr)
