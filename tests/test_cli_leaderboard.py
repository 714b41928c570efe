"""`kernelbench leaderboard` on synthetic runs of two models and a CPU run: every number checked
against values computed by hand (GM over sizes, then over passed items; PASS+Good; fast_p; the
unbiased pass@k; USD per problem; cumulative pass by round), and the CPU run shown as no speed."""
from __future__ import annotations

import json
import math

import pytest

import cli_synth as synth
from kbrun import REPO
from pytest_kernelbench.cli import leaderboard, main, reports


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    return synth.model_a(tmp), synth.model_b(tmp), synth.cpu_reference(tmp)


@pytest.fixture(scope="module")
def board(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("board")
    assert main.main(["leaderboard", *map(str, runs), "--json", str(out / "lb.json"), "--md", str(out / "lb.md")]) == 0
    numbers = {e["name"]: e for e in json.loads((out / "lb.json").read_text())}
    return numbers, (out / "lb.md").read_text()


def _row(md: str, name: str, table: str = "## Leaderboard") -> list[str]:
    block = md.split(table, 1)[1].split("\n## ", 1)[0]
    line = next(ln for ln in block.splitlines() if ln.startswith("| ") and f" {name} " in ln)
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_synthetic_reports_follow_the_schema(runs):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((REPO / "pytest_kernelbench" / "schemas" / "report.schema.json").read_text())
    for path in runs:
        jsonschema.validate(json.loads(path.read_text()), schema)


def test_model_a_numbers_by_hand(board):
    a = board[0]["prov/model-a"]["aggregates"]
    # passed items (best round of each sample): sizes [2, .5], [4, 1], [.8, .8]: GM over sizes first
    scores = [math.sqrt(2.0 * 0.5), math.sqrt(4.0 * 1.0), math.sqrt(0.8 * 0.8)]
    gm = math.prod(scores) ** (1 / 3)
    assert a["total"] == 6 and a["passed"] == 3 and a["pass_rate"] == pytest.approx(0.5)
    assert a["gm_speedup"] == pytest.approx(gm) and a["pass_x_gm"] == pytest.approx(0.5 * gm)
    # verdicts: 1.0 on_par (its band holds 1), 2.0 better, 0.8 degraded
    assert a["tiers"] == {"on_par": 1, "better": 1, "degraded": 1}
    assert a["pass_good"] == pytest.approx(2 / 6)
    assert a["fast_p"] == pytest.approx({"0.0": 3 / 6, "1.0": 1 / 6, "1.5": 1 / 6, "2.0": 0.0})
    # pass@k: all_reduce 2 of 2 samples pass, ring 1 of 2, fusion 0 of 2: 1 - C(n-c, k) / C(n, k)
    pass1 = (1.0 + (1 - math.comb(1, 1) / math.comb(2, 1)) + 0.0) / 3
    pass2 = (1.0 + 1.0 + 0.0) / 3
    fast1 = ((1 - math.comb(1, 1) / math.comb(2, 1)) + 0 + 0) / 3    # only the 2.0x sample beats 1
    assert a["samples"] == pytest.approx({"pass@1": pass1, "pass@2": pass2, "fast_1@1": fast1, "fast_1@2": 1 / 3})
    # $0.01 a round: 1 + 2 + 1 + 2 + 2 + 0 (the API error) rounds over 3 problems
    assert board[0]["prov/model-a"]["usd_per_problem"] == pytest.approx(0.08 / 3)
    # first passing rounds: s0 r1, s1 r2, ring s0 r1, others never: of 6 samples
    assert board[0]["prov/model-a"]["pass_by_round"] == pytest.approx([2 / 6, 3 / 6])


def test_model_b_and_the_ranking(board):
    numbers, md = board
    b = numbers["prov/model-b"]["aggregates"]
    gm = math.sqrt(math.sqrt(1.2 * 1.2) * 1.0)
    assert (b["total"], b["passed"], b["skipped"]) == (3, 2, 1)
    assert b["pass_x_gm"] == pytest.approx(2 / 3 * gm) and b["pass_good"] == pytest.approx(2 / 3)
    assert "samples" not in b          # one sample per problem: no pass@k
    # ranked by Pass x GM: model-b 0.730 before model-a 0.585; the CPU run unranked after them
    rows = [ln for ln in md.split("## Leaderboard", 1)[1].split("\n## ", 1)[0].splitlines() if ln.startswith("| ")][1:]
    assert [r.split("|")[2].strip() for r in rows] == ["prov/model-b", "prov/model-a", "reference (self-check)"]
    assert _row(md, "prov/model-b") == ["1", "prov/model-b", "4x NVIDIA H200, W=4", "3", "66.7% (2/3)", "1.095x",
                                        "0.730", "66.7%", "33.3%", "-", "-", "$0.0300"]
    assert _row(md, "prov/model-a")[:12] == ["2", "prov/model-a", "4x NVIDIA H200, W=4", "3", "50.0% (3/6)",
                                             "1.170x", "0.585", "33.3%", "16.7%", "0.500", "0.667 (k=2)", "$0.0267"]


def test_cpu_run_shows_no_speed_never_zero_or_one(board):
    numbers, md = board
    cpu = numbers["reference (self-check)"]
    assert cpu["machine"] == "CPU (gloo), W=4" and cpu["no_speed"] == "cpu: not a speed"
    a = cpu["aggregates"]
    assert a["pass_rate"] == 1.0 and a["gm_speedup"] is None and a["pass_x_gm"] is None and a["pass_good"] is None
    row = _row(md, "reference (self-check)")
    assert row[0] == "-" and row[5] == "cpu: not a speed" and row[6:9] == ["n/a", "n/a", "n/a"]
    speed = _row(md, "reference (self-check)", "## Speed")
    assert speed[1:5] == ["n/a"] * 4 and "0.0%" not in speed and "1.000x" not in " ".join(row)


def test_breakdowns_and_rounds(board):
    _, md = board
    assert _row(md, "prov/model-a", "## By category") == ["prov/model-a", "2/2 1.41x", "0/2", "1/2 0.80x"]
    assert _row(md, "reference (self-check)", "## By category") == ["reference (self-check)", "1/1", "-", "1/1"]
    assert "| model / candidate | easy | medium | hard |" in md           # difficulty in its own order
    assert "| ep |" not in md.split("## By parallelism")[0]               # only a skipped item had it
    assert _row(md, "prov/model-a", "## Cumulative") == ["prov/model-a", "33.3%", "50.0%"]


def test_reports_of_one_model_on_one_machine_merge(tmp_path):
    first = synth.model_b(tmp_path, "b1.json")
    second = synth.model_b(tmp_path, "b2.json", all_reduce=(1.5, 1.5))
    entries = reports.entries([reports.load(first), reports.load(second)])
    assert len(entries) == 1 and len(entries[0].sources) == 2
    # the later report's record of the same item replaces the earlier one
    score = next(i["score"] for i in entries[0].items if i["problem"] == "collective/all_reduce")
    assert score == pytest.approx(1.5)


def test_a_cut_short_run_reads_from_its_jsonl(runs):
    doc = reports.load(runs[0].with_suffix(".jsonl"))
    scores = leaderboard.ranked(reports.entries([doc]))
    assert scores[0].entry.name == "prov/model-a" and scores[0].aggregates["passed"] == 3


def test_bad_report_is_one_line(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert main.main(["leaderboard", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == f"kernelbench leaderboard: {bad}: not a kernelbench report (no item list)"


def test_committed_leaderboard_is_up_to_date():
    """reports/leaderboard/leaderboard.md is the command's output for the reports it names."""
    committed = (REPO / "reports" / "leaderboard" / "leaderboard.md").read_text()
    sources = [s.strip("` ") for s in committed.rsplit("Reports: ", 1)[1].strip().split(",")]
    docs = [reports.load(REPO / s) for s in sources]
    for doc, src in zip(docs, sources):
        doc["path"] = src
    scores = leaderboard.ranked(reports.entries(docs))
    assert leaderboard.markdown(leaderboard.tables(scores), sources) == committed, (
        "regenerate: python -m pytest_kernelbench.cli leaderboard " + " ".join(sources)
        + " --md reports/leaderboard/leaderboard.md --html reports/leaderboard/index.html")
