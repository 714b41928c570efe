"""The leaderboard: one row per model or candidate, every number from metrics.py (Pass x GM, pass
rate, PASS+Good, GM-speedup, fast_p, pass@k, USD per problem), then the breakdowns by category,
parallelism, difficulty and library, and the cumulative pass rate by refinement round. Tables are
plain data, rendered as markdown here and as HTML by html.py."""
from __future__ import annotations

from dataclasses import dataclass

from .. import metrics
from ..protocol import SHARED_NO_SPEED, Outcome
from ..report.reading import Board, Entry
from ..spec.problem import DIFFICULTIES

NA = "n/a"        # a speed figure of an entry that measured no speed: never shown as 0 or 1
BREAKDOWN_TITLES = {"category": "category", "parallelism": "parallelism", "difficulty": "difficulty",
                    "libraries": "library", "family": "family of variants"}


@dataclass
class Score:
    """An entry's numbers (what `--json` writes and the tests check)."""
    entry: Entry
    aggregates: dict
    breakdowns: dict
    problems: int
    usd_per_problem: float | None
    pass_by_round: list[float]
    no_speed: str | None            # why there is no speed figure, else None
    label: str = ""                 # the name, with the machine where two entries share a name

    def as_dict(self) -> dict:
        return {"name": self.entry.name, "machine": self.entry.machine, "sources": self.entry.sources,
                "problems": self.problems, "aggregates": self.aggregates, "breakdowns": self.breakdowns,
                "usd_per_problem": self.usd_per_problem, "pass_by_round": self.pass_by_round,
                "no_speed": self.no_speed,
                "replaced": {earlier: dict(later) for earlier, later in self.entry.replaced.items()}}


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""
    key: str = ""


def score(entry: Entry) -> Score:
    agg = metrics.aggregate(entry.items)
    counted = [i for i in entry.items if i.get("outcome") in metrics.COUNTED]
    return Score(entry, agg, metrics.breakdowns(entry.items), len({i.get("problem") for i in counted}),
                 metrics.usd_per_problem(entry.items), metrics.pass_by_round(entry.items), _no_speed(agg, counted))


def _no_speed(agg: dict, counted: list[dict]) -> str | None:
    if agg.get("gm_speedup") is not None:
        return None
    if any(i.get("device") == "cpu" for i in counted):
        return "cpu: not a speed"
    if any(metrics.is_shared(i) for i in counted):
        return SHARED_NO_SPEED
    if not agg.get("passed"):
        return "no item passed"
    return "not measured (timing off)"


def ranked(entries: list[Entry]) -> list[Score]:
    """By Pass x GM (the primary rank); entries without a speed figure follow, by pass rate."""
    scores = [score(e) for e in entries]
    names = [s.entry.name for s in scores]
    for s in scores:
        s.label = s.entry.name if names.count(s.entry.name) == 1 else f"{s.entry.name} ({s.entry.machine})"
    return sorted(scores, key=lambda s: (s.aggregates.get("pass_x_gm") is None, -(s.aggregates.get("pass_x_gm") or 0),
                                         -(s.aggregates.get("pass_rate") or 0), s.entry.name))


def pct(x: float | None, none: str = NA) -> str:
    return none if x is None else f"{100 * x:.1f}%"


def num(x: float | None, pattern: str = "{:.3f}", none: str = NA) -> str:
    return none if x is None else pattern.format(x)


def _samples(s: Score) -> tuple[str, str, str]:
    """(pass@1, pass@k, fast_1@k): only with several samples per problem (--kb-samples)."""
    samples = s.aggregates.get("samples") or {}
    ks = sorted(int(k.split("@")[1]) for k in samples if k.startswith("pass@"))
    if not ks:
        return "-", "-", "-"
    k = ks[-1]
    return (num(samples.get("pass@1")), f"{num(samples.get(f'pass@{k}'))} (k={k})",
            f"{num(samples.get(f'fast_1@{k}'))} (k={k})")


def fast_1(aggregates: dict) -> float | None:
    """The run's fast_1 where metrics.py gives it, else fast_p at 1 (reports written before)."""
    value = aggregates.get("fast_1")
    return value if isinstance(value, (int, float)) else (aggregates.get("fast_p") or {}).get("1.0")


def main_table(scores: list[Score]) -> Table:
    rows = []
    rank = 0
    for s in scores:
        a = s.aggregates
        ranked_ = a.get("pass_x_gm") is not None
        if ranked_:
            rank += 1
        usd = s.usd_per_problem
        usd_cell = "-" if usd is None else f"${usd:.4f}" + ("" if (a.get("cost") or {}).get("usd_known", True) else "*")
        p1, pk, _ = _samples(s)
        rows.append([str(rank) if ranked_ else "-", s.entry.name, s.entry.machine, str(s.problems),
                     f"{pct(a.get('pass_rate'))} ({a['passed']}/{a['total']}"
                     + (f"; {a['errors']} retryable" if a.get("errors") else "") + ")",
                     s.no_speed or num(a.get("gm_speedup"), "{:.3f}x"),
                     num(a.get("pass_x_gm")), pct(fast_1(a)), pct(a.get("pass_good")), p1, pk, usd_cell])
    note = ("Pass rate over the records with a verdict on the candidate; retryable: records the infrastructure "
            "left without one (harness or API errors), counted apart, never as a zero. "
            "Pass x GM = pass rate x GM-speedup (GM over sizes per item, then over passed items); fast_1: "
            "counted items that passed faster than the reference; "
            f"{NA}: no speed was measured (CPU runs time gloo, which is not a speed). pass@k with several "
            "samples per problem (unbiased estimator). * some calls unpriced.")
    if any(metrics.is_shared(i) for s in scores for i in s.entry.items):
        note += (" A machine marked shared GPU ran ranks sharing GPUs (--kb-oversubscribe): correctness only, "
                 "its items outside every speed figure, its row apart from timed runs.")
    if any(s.entry.replaced for s in scores):
        note += " Some rows merge reports whose records of the same item a later report replaced: see Reports."
    return Table("Leaderboard", ["#", "model / candidate", "machine", "problems", "pass rate", "GM-speedup",
                                 "Pass x GM", "fast_1", "PASS+Good", "pass@1", "pass@k", "$ / problem"], rows, note,
                 key="leaderboard")


def speed_table(scores: list[Score]) -> Table:
    rows = []
    for s in scores:
        a = s.aggregates
        fast = a.get("fast_p") or {}
        tiers = a.get("tiers") or {}
        tier_cell = "/".join(str(tiers.get(t, 0)) for t, _ in metrics.TIERS) if s.no_speed is None else NA
        failures = ", ".join(f"{k} {v}" for k, v in sorted((a.get("failures") or {}).items())) or "-"
        rows.append([s.label, *(pct(fast.get(str(p))) for p in metrics.FAST_P), _samples(s)[2],
                     pct(a.get("roofline_gm")), tier_cell, str(a.get("skipped", 0)), failures])
    return Table("Speed, verdict tiers and failures",
                 ["model / candidate", *(f"fast_{p:g}" for p in metrics.FAST_P), "fast_1@k", "roofline GM",
                  "better / on_par / degraded / severe", Outcome.SKIPPED, "failures"], rows,
                 "fast_p = passed items with score > p over counted items; roofline GM over passed items.",
                 key="speed")


def breakdown_tables(scores: list[Score]) -> list[Table]:
    out = []
    for key in metrics.BREAKDOWNS:
        # a tag only skipped items carry (no problem ran) gets no column
        tags = tag_order(key, {t for s in scores for t, g in s.breakdowns.get(key, {}).items() if g.get("total")})
        if not tags:
            continue
        rows = []
        for s in scores:
            groups = s.breakdowns.get(key, {})
            rows.append([s.label] + [_cell(groups.get(t)) for t in tags])
        out.append(Table(f"By {BREAKDOWN_TITLES[key]}", ["model / candidate", *tags], rows,
                         "passed/counted, then GM-speedup where speed was measured", key=key))
    return out


def tag_order(key: str, tags: set) -> list[str]:
    """Difficulties easy -> hard, every other tag alphabetically."""
    rank = {d: n for n, d in enumerate(DIFFICULTIES)} if key == "difficulty" else {}
    return sorted(tags, key=lambda t: (rank.get(t, len(rank)), t))


def _cell(group: dict | None) -> str:
    if not group or not group.get("total"):
        return "-"
    gm = group.get("gm_speedup")
    return f"{group['passed']}/{group['total']}" + (f" {gm:.2f}x" if gm is not None else "")


def rounds_table(scores: list[Score]) -> Table | None:
    longest = max((len(s.pass_by_round) for s in scores), default=0)
    if longest < 2:
        return None
    rows = [[s.label] + [pct(s.pass_by_round[r]) if r < len(s.pass_by_round) else "-" for r in range(longest)]
            for s in scores]
    return Table("Cumulative pass rate by refinement round", ["model / candidate"] + [f"round {r + 1}" for r in
                                                                                    range(longest)], rows,
                 "an item counts from the first round that passed", key="rounds")


def tables(scores: list[Score]) -> list[Table]:
    out = [main_table(scores), speed_table(scores), *breakdown_tables(scores)]
    rounds = rounds_table(scores)
    if rounds:
        out.append(rounds)
    return out


def report_lines(scores: list[Score], board: Board) -> list[tuple[str, str]]:
    """(report, what became of it), in the order given: the row it feeds and, where a later report
    of the same row replaced some of its records, by which report and for how many items."""
    said: dict[str, str] = {}
    for s in scores:
        e = s.entry
        for src in dict.fromkeys(e.sources):
            text = f"{s.label}: {e.read[src]} item" + ("" if e.read[src] == 1 else "s")
            later = e.replaced.get(src)
            if later:
                text += (f", {e.kept(src)} kept, {sum(later.values())} replaced by later reports ("
                         + ", ".join(f"`{lt}` {n}" for lt, n in later.items()) + ")")
            if src in e.incomplete:
                text += f"; INCOMPLETE: the run was cut short, {e.incomplete[src]} selected items did not run"
            said[src] = text
    for path, why in board.unused:
        said[path] = f"no row: {why}"
    return [(path, said[path]) for path in dict.fromkeys(board.paths) if path in said]


REPORTS_NOTE = ("In the order given. Reports of one model or candidate on one machine make one row; where two "
                "hold a record of the same problem and sample, the later report's record replaces the earlier one's.")


def markdown(tabs: list[Table], reports: list[tuple[str, str]] | None = None) -> str:
    parts = []
    for t in tabs:
        lines = [f"## {t.title}", "", "| " + " | ".join(t.header) + " |", "|" + "---|" * len(t.header)]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in t.rows]
        if t.note:
            lines += ["", t.note]
        parts.append("\n".join(lines))
    if reports:
        parts.append("\n".join(["## Reports", "", REPORTS_NOTE, ""] + [f"- `{p}`: {text}" for p, text in reports]))
    return "\n\n".join(parts) + "\n"
