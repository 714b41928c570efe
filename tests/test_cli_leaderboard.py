"""`kernelbench leaderboard` on synthetic runs of two models and a CPU run: every number checked
against values computed by hand (GM over sizes, then over passed items; PASS+Good; fast_p; the
unbiased pass@k; USD per problem; cumulative pass by round), and the CPU run shown as no speed.
What the board is made of: a file that is not a report is skipped, one `auto` candidate is one row,
a run that counted nothing makes none, and a later report's replacing records is said."""
from __future__ import annotations

import json
import math

import cli_synth as synth
import pytest
from kbrun import REPO

from pytest_kernelbench.cli import leaderboard, main
from pytest_kernelbench.report import reading as reports


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
    # 6 samples, one of them an API error (retryable: counted apart, not a zero): 5 with a verdict
    assert a["total"] == 5 and a["passed"] == 3 and a["pass_rate"] == pytest.approx(3 / 5) and a["errors"] == 1
    assert a["gm_speedup"] == pytest.approx(gm) and a["pass_x_gm"] == pytest.approx(3 / 5 * gm)
    # verdicts: 1.0 on_par (its band holds 1), 2.0 better, 0.8 degraded
    assert a["tiers"] == {"on_par": 1, "better": 1, "degraded": 1}
    assert a["pass_good"] == pytest.approx(2 / 5)
    assert a["fast_p"] == pytest.approx({"0.0": 3 / 5, "1.0": 1 / 5, "1.5": 1 / 5, "2.0": 0.0})
    # pass@k: all_reduce 2 of 2 samples pass, ring 1 of 2, fusion 0 of 2: 1 - C(n-c, k) / C(n, k)
    pass1 = (1.0 + (1 - math.comb(1, 1) / math.comb(2, 1)) + 0.0) / 3
    pass2 = (1.0 + 1.0 + 0.0) / 3
    fast1 = ((1 - math.comb(1, 1) / math.comb(2, 1)) + 0 + 0) / 3    # only the 2.0x sample beats 1
    assert a["samples"] == pytest.approx({"pass@1": pass1, "pass@2": pass2, "fast_1@1": fast1, "fast_1@2": 1 / 3})
    # $0.01 a round: 1 + 2 + 1 + 2 + 2 + 0 (the API error) rounds over 3 problems
    assert board[0]["prov/model-a"]["usd_per_problem"] == pytest.approx(0.08 / 3)
    # first passing rounds: s0 r1, s1 r2, ring s0 r1, others never: of the 5 samples with a verdict
    assert board[0]["prov/model-a"]["pass_by_round"] == pytest.approx([2 / 5, 3 / 5])


def test_model_b_and_the_ranking(board):
    numbers, md = board
    b = numbers["prov/model-b"]["aggregates"]
    gm = math.sqrt(math.sqrt(1.2 * 1.2) * 1.0)
    assert (b["total"], b["passed"], b["skipped"]) == (3, 2, 1)
    assert b["pass_x_gm"] == pytest.approx(2 / 3 * gm) and b["pass_good"] == pytest.approx(2 / 3)
    assert "samples" not in b          # one sample per problem: no pass@k
    # ranked by Pass x GM: model-b 0.730 before model-a 0.702; the CPU run unranked after them
    rows = [ln for ln in md.split("## Leaderboard", 1)[1].split("\n## ", 1)[0].splitlines() if ln.startswith("| ")][1:]
    assert [r.split("|")[2].strip() for r in rows] == ["prov/model-b", "prov/model-a", "reference (self-check)"]
    # columns: # name machine problems pass-rate GM Pass-x-GM fast_1 PASS+Good pass@1 pass@k $
    assert _row(md, "prov/model-b") == ["1", "prov/model-b", "4x NVIDIA H200, W=4", "3", "66.7% (2/3)", "1.095x",
                                        "0.730", "33.3%", "66.7%", "-", "-", "$0.0300"]
    assert _row(md, "prov/model-a")[:12] == ["2", "prov/model-a", "4x NVIDIA H200, W=4", "3",
                                             "60.0% (3/5; 1 retryable)", "1.170x", "0.702", "20.0%", "40.0%", "0.500", "0.667 (k=2)", "$0.0267"]


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
    # fusion: one sample failed, the other an API error (retryable, counted apart)
    assert _row(md, "prov/model-a", "## By category") == ["prov/model-a", "2/2 1.41x", "0/1", "1/2 0.80x"]
    assert _row(md, "reference (self-check)", "## By category") == ["reference (self-check)", "1/1", "-", "1/1"]
    assert "| model / candidate | easy | medium | hard |" in md           # difficulty in its own order
    assert "| ep |" not in md.split("## By parallelism")[0]               # only a skipped item had it
    assert _row(md, "prov/model-a", "## Cumulative") == ["prov/model-a", "40.0%", "60.0%"]   # of 5 with a verdict


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


def test_no_report_at_all_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert main.main(["leaderboard", str(bad)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"kernelbench leaderboard: skipped {bad}: not a kernelbench report (no item list)",
        "kernelbench leaderboard: no report with a counted item among 1 file(s)"]


def test_a_file_that_is_not_a_report_is_skipped_with_a_warning(tmp_path, capsys):
    """A calibration record lies beside the reports (reports/baselines/*-calibration.json): a glob
    over the folder must still give the board."""
    good = synth.model_b(tmp_path)
    calibration = tmp_path / "h200x4-calibration.json"
    calibration.write_text(json.dumps({"gpus": 4, "gpu_model": "NVIDIA H200", "hbm_bw": 4.2e12}))
    garbled = tmp_path / "cut.json"
    garbled.write_text('{"items": [')
    assert main.main(["leaderboard", str(calibration), str(good), str(garbled)]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"kernelbench leaderboard: skipped {calibration}: not a kernelbench report (no item list)",
        f"kernelbench leaderboard: skipped {garbled}: not JSON (Expecting value: line 1 column 12 (char 11))"]
    assert _row(out, "prov/model-b")[:2] == ["1", "prov/model-b"]
    assert f"- `{calibration}`: no row: not a kernelbench report (no item list)" in out


def test_one_auto_candidate_is_one_row_whatever_its_items_happened_to_use(tmp_path):
    """`auto` runs a shipped solution where one runs here, else the self-check: two runs of it over
    different selections are one candidate, not a "reference" row and an "auto: ..." row."""
    fusion = synth.auto_run(tmp_path, "fusion.json", {"fusion/matmul_reduce_scatter": "self-check"})
    collective = synth.auto_run(tmp_path, "collective.json", {"collective/all_reduce": "shipped:symm_mem",
                                                              "p2p/ring_exchange": "self-check"})
    reference = synth.cpu_reference(tmp_path)         # --kb-candidate=reference, another machine
    entries = reports.entries([reports.load(p) for p in (fusion, collective, reference)])
    assert sorted((e.name, e.machine, len(e.items)) for e in entries) == [
        ("auto (self-check, shipped:symm_mem)", "4x NVIDIA H200, W=4", 3),
        ("reference (self-check)", "CPU (gloo), W=4", 2)]


def test_a_run_that_counted_nothing_makes_no_row(tmp_path, capsys):
    skipped = synth.write(tmp_path / "skips.json", [synth.record("ep/moe_dispatch", "skipped", message="needs 8 GPUs")],
                          synth.H200, {"candidate": "auto", "model": None})
    good = synth.model_b(tmp_path)
    assert main.main(["leaderboard", str(skipped), str(good), "--json", str(tmp_path / "lb.json")]) == 0
    out, err = capsys.readouterr()
    assert [e["name"] for e in json.loads((tmp_path / "lb.json").read_text())] == ["prov/model-b"]
    assert err.strip() == f"kernelbench leaderboard: skipped {skipped}: no counted item (1 skipped)"
    rows = [ln for ln in out.split("## Leaderboard", 1)[1].split("\n## ", 1)[0].splitlines() if ln.startswith("| ")]
    assert len(rows) == 2            # the header and model-b


def test_a_later_report_replacing_records_is_said_on_the_board(tmp_path, capsys):
    """A rerun of one problem replaces the first run's record of it; the board says which report
    won for how many items, in the order the reports were given."""
    first = synth.model_b(tmp_path, "b1.json")
    rerun = synth.only(synth.model_b(tmp_path, "b2-full.json", all_reduce=(1.5, 1.5)), {"collective/all_reduce"},
                       "b2.json")
    assert main.main(["leaderboard", str(first), str(rerun), "--json", str(tmp_path / "lb.json")]) == 0
    out = capsys.readouterr().out
    assert f"- `{first}`: prov/model-b: 4 items, 3 kept, 1 replaced by later reports (`{rerun}` 1)" in out
    assert f"- `{rerun}`: prov/model-b: 1 item" in out
    assert "a later report replaced: see Reports" in out.split("## Speed")[0]
    entry = json.loads((tmp_path / "lb.json").read_text())[0]
    assert entry["replaced"] == {str(first): {str(rerun): 1}}
    # given the other way round, the first run's record wins
    assert main.main(["leaderboard", str(rerun), str(first)]) == 0
    assert f"- `{rerun}`: prov/model-b: 1 item, 0 kept, 1 replaced by later reports (`{first}` 1)" in \
        capsys.readouterr().out


def test_fast_1_sits_beside_pass_x_gm_and_reads_the_runs_aggregate(board):
    numbers, md = board
    header = [c.strip() for c in md.split("## Leaderboard", 1)[1].split("\n")[2].strip("|").split("|")]
    assert header[header.index("Pass x GM") + 1] == "fast_1"
    score = leaderboard.ranked(reports.entries([reports.load(p) for p in numbers["prov/model-b"]["sources"]]))[0]
    row = leaderboard.main_table([score]).rows[0]
    assert row[header.index("fast_1")] == "33.3%"                 # older reports: fast_p at 1
    score.aggregates["fast_1"] = 0.25                             # the run's own fast_1 (issue 24) wins
    assert leaderboard.main_table([score]).rows[0][header.index("fast_1")] == "25.0%"


def test_committed_leaderboard_is_up_to_date(monkeypatch):
    """reports/leaderboard/leaderboard.md is the command's output for the files it lists."""
    committed = (REPO / "reports" / "leaderboard" / "leaderboard.md").read_text()
    listed = committed.rsplit("## Reports", 1)[1]
    sources = [ln.split("`")[1] for ln in listed.splitlines() if ln.startswith("- `")]
    monkeypatch.chdir(REPO)                      # the board names the files as given, from the root
    board = reports.board(sources)
    scores = leaderboard.ranked(board.entries)
    text = leaderboard.markdown(leaderboard.tables(scores), leaderboard.report_lines(scores, board))
    assert text == committed, (
        "regenerate (from the root): python -m pytest_kernelbench.cli leaderboard " + " ".join(sources)
        + " --md reports/leaderboard/leaderboard.md --html reports/leaderboard/index.html")


def test_an_interrupted_run_is_marked_on_the_board(tmp_path):
    """A run cut short by Ctrl-C has a report that looks finished; the board must not read it as whole."""
    from pytest_kernelbench.cli.leaderboard import report_lines
    from pytest_kernelbench.report.reading import board as make_board
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(_cut_short_report()))
    b = make_board([path])
    assert b.entries and b.entries[0].name.endswith("(incomplete run)")
    from pytest_kernelbench.cli.leaderboard import ranked
    lines = dict(report_lines(ranked(b.entries), b))
    assert "INCOMPLETE" in lines[str(path)] and "4 selected items did not run" in lines[str(path)]


def _cut_short_report() -> dict:
    from pytest_kernelbench import report
    items = [{"nodeid": "p/x/problem.yaml::test_problem[collective/x]", "problem": "collective/x", "outcome": "passed",
              "category": "collective", "parallelism": [], "difficulty": "easy", "libraries": [], "device": "cpu",
              "candidate": {"kind": "reference", "label": "self-check"}, "speed": "cpu: not a speed"}]
    doc = {"schema_version": report.SCHEMA_VERSION, "machine": {"gpu_count": 0}, "config": {
        "settings": {"candidate": "reference", "model": None, "solutions": None}}, "items": items,
        "interrupted": {"reason": "interrupted (Ctrl-C)", "left": 4, "resume": "pytest --kb-resume=x.jsonl"}}
    from pytest_kernelbench import metrics
    doc["aggregates"], doc["breakdowns"] = metrics.aggregate(items), metrics.breakdowns(items)
    return doc
