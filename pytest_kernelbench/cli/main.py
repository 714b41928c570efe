"""`kernelbench`: what to do with reports once runs are done.

    kernelbench leaderboard REPORT... [--html FILE] [--png DIR] [--md FILE] [--json FILE]
    kernelbench compare BASE NEW [--fail-on=speedup:5%,pass,latency:15%,busbw:5%] [--per-size]   exit 1 on a regression
    kernelbench plots REPORT... --png DIR                          per item: latency and busbw over size
    kernelbench export REPORT... --format jsonl|parquet -o FILE    one row per attempt
    kernelbench suite-table | overhead REPORT [--md FILE]          post-processors of GPU runs
    kernelbench fidelity OUTDIR [--runs N] [--world W]             timing fidelity (GPU machine)
    kernelbench spread REPORT... [--md FILE]                       self-check spread per size over runs
    kernelbench reward REPORT... --preset NAME                     rewards recomputed from stored records
    kernelbench prompt PROBLEM | try PROBLEM FILE                  the task a model sees; one evaluation
    kernelbench serve [--host H --port P --token T]                the scoring service (docs/training.md)

Also `python -m pytest_kernelbench.cli ...` (no install needed from a checkout).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..report import diff as cmp
from ..report import reading as reports
from . import export, leaderboard, plots

USAGE = 2


def _leaderboard(a: argparse.Namespace) -> int:
    board = reports.board(a.reports)
    for path, why in board.unused:
        print(f"kernelbench leaderboard: skipped {path}: {why}", file=sys.stderr)
    if not board.entries:
        raise ValueError(f"no report with a counted item among {len(board.paths)} file(s)")
    scores = leaderboard.ranked(board.entries)
    tabs = leaderboard.tables(scores)
    listed = leaderboard.report_lines(scores, board)
    text = leaderboard.markdown(tabs, listed)
    print(text, end="")
    if a.md:
        _write(a.md, text)
    if a.json:
        _write(a.json, json.dumps([s.as_dict() for s in scores], indent=1, default=str) + "\n")
    drawn, missing = None, None
    if a.png or a.html:
        try:
            drawn = plots.render(scores)
        except plots.PlotsUnavailable as e:
            if a.png:
                raise
            missing = str(e)
            print(f"kernelbench: {missing} (the page has the tables only)", file=sys.stderr)
    if a.png and drawn:
        Path(a.png).mkdir(parents=True, exist_ok=True)
        for plot in drawn:
            if plot.png:
                (Path(a.png) / f"{plot.stem}.png").write_bytes(plot.png)
            else:
                print(f"kernelbench leaderboard: no {plot.stem}.png: {plot.note}", file=sys.stderr)
    if a.html:
        from . import html
        _write(a.html, html.page(tabs, drawn, listed, missing))
    return 0


def _compare(a: argparse.Namespace) -> int:
    result = cmp.compare(reports.load(a.base), reports.load(a.new), cmp.parse_fail_on(a.fail_on))
    result.per_size = result.per_size or a.per_size
    print("\n".join(result.lines()))
    return 1 if result.failed else 0


def _plots(a: argparse.Namespace) -> int:
    from . import sizeplots
    items = [i for path in a.reports for i in reports.items(reports.load(path))]
    if a.problem:
        items = [i for i in items if any(p in str(i.get("problem")) for p in a.problem)]
    drawn = sizeplots.render(items)
    Path(a.png).mkdir(parents=True, exist_ok=True)
    for plot in drawn:
        if plot.png:
            (Path(a.png) / f"{plot.stem}.png").write_bytes(plot.png)
            print(f"{plot.stem}.png: {plot.title}" + (f" ({plot.note})" if plot.note else ""))
        else:
            print(f"kernelbench plots: no {plot.stem}.png: {plot.note}", file=sys.stderr)
    if not any(p.png for p in drawn):
        raise ValueError(f"nothing to draw among {len(items)} item(s) (passed items with bytes per size)")
    return 0


def _export(a: argparse.Namespace) -> int:
    if a.format == "parquet":
        export.parquet_modules()         # before any work: a missing pyarrow is one line, at once
    rows = export.rows(a.reports, Path(a.problems) if a.problems else None)
    out = Path(a.output or f"kernelbench-export.{a.format}")
    export.write(rows, out, a.format)
    print(f"export: {len(rows)} attempts -> {out}")
    return 0


def _post(a: argparse.Namespace) -> int:
    from . import overhead, suite_table
    doc = reports.load(a.report)
    lines = suite_table.table(doc) if a.cmd == "suite-table" else overhead.table(doc)
    text = "\n".join(lines)
    print(text)
    if a.md:
        _write(a.md, (f"Source: {a.report}\n\n" if a.cmd == "overhead" else "") + text + "\n")
    return 0


def _spread(a: argparse.Namespace) -> int:
    from . import fidelity
    docs = [reports.load(p) for p in a.reports]
    text = "\n".join(fidelity.spread_lines(fidelity.spread(docs), len(docs)))
    print(text)
    if a.md:
        _write(a.md, "Sources: " + ", ".join(a.reports) + "\n\n" + text + "\n")
    return 0


def _fidelity(a: argparse.Namespace) -> int:
    from . import fidelity
    result = fidelity.run(Path(a.out), a.runs, a.world)
    print("\n".join(fidelity.lines(result)))
    return 0


def _write(path: str | Path, text: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text, encoding="utf-8")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kernelbench", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    lb = sub.add_parser("leaderboard", help="one row per model/candidate: markdown on stdout, --html, --png")
    lb.add_argument("reports", nargs="+", help="JSON reports (or the JSONL of a cut-short run); where two hold "
                    "the same item of one row, the later one's record counts; a file that is not a report "
                    "is skipped with a warning")
    lb.add_argument("--html", help="write a self-contained page with the tables and plots")
    lb.add_argument("--png", help="write the plots into this folder (needs matplotlib: the extra 'plot')")
    lb.add_argument("--md", help="also write the markdown to this file")
    lb.add_argument("--json", help="write every entry's numbers as JSON")
    lb.set_defaults(run=_leaderboard)
    c = sub.add_parser("compare", help="per-item and aggregate deltas of NEW against BASE; exit 1 on a regression")
    c.add_argument("base")
    c.add_argument("new")
    c.add_argument("--fail-on", default="speedup:5%,pass",
                   help="which regressions fail: speedup[:N%%] (beyond the noise bands), pass, or none "
                        "(default: speedup:5%%,pass); per size: latency[:N%%] (candidate median time up, default "
                        "15%%), busbw[:N%%] (its busbw, else algbw, down, default 5%%)")
    c.add_argument("--per-size", action="store_true", help="print the per-size table: candidate latency (us) and "
                   "busbw/algbw (GB/s) of each size timed on GPUs in both, with deltas (shown anyway with latency/busbw)")
    c.set_defaults(run=_compare)
    pl = sub.add_parser("plots", help="per item: latency and busbw (else algbw) over size, candidate and reference, "
                        "as PNGs (needs matplotlib: the extra 'plot')")
    pl.add_argument("reports", nargs="+")
    pl.add_argument("--png", required=True, help="the folder the PNGs go to (sizes-<problem>-w<W>.png)")
    pl.add_argument("--problem", action="append", help="only items whose problem id contains this (repeatable)")
    pl.set_defaults(run=_plots)
    ex = sub.add_parser("export", help="one row per attempt, for post-training")
    ex.add_argument("reports", nargs="+")
    ex.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    ex.add_argument("-o", "--output", help="output file (default kernelbench-export.FORMAT)")
    ex.add_argument("--problems", help="the problems/ tree, to drop harness lines from messages (default ./problems)")
    ex.set_defaults(run=_export)
    for name, what in (("suite-table", "per-problem, per-size table of a reference self-check run"),
                       ("overhead", "where each item's wall time went (the harness's own cost)")):
        p = sub.add_parser(name, help=what)
        p.add_argument("report")
        p.add_argument("--md", help="also write the table to this file")
        p.set_defaults(run=_post)
    f = sub.add_parser("fidelity", help="timing fidelity runs on a GPU machine (from the repository root)")
    f.add_argument("out")
    f.add_argument("--runs", type=int, default=5)
    f.add_argument("--world", type=int, default=4)
    f.set_defaults(run=_fidelity)
    sp = sub.add_parser("spread", help="self-check runs (reference vs itself): speedups within 1 +- 3%% "
                                       "(+-5%% at tiny/small) per size, over one or more runs")
    sp.add_argument("reports", nargs="+")
    sp.add_argument("--md", help="also write the table to this file")
    sp.set_defaults(run=_spread)
    from . import scoring
    scoring.add_commands(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        return a.run(a)
    except (reports.ReportError, export.ExportError, plots.PlotsUnavailable, ValueError, OSError) as e:
        print(f"kernelbench {a.cmd}: {e}", file=sys.stderr)
        return USAGE
