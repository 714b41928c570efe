"""`kernelbench compare BASE NEW` and pytest's --kb-compare: a planted regression fails (exit 1),
a delta inside the noise bands does not (exit 0), a lost pass fails, a CPU run compares by outcome
only; the pytest side prints the comparison under the summary and can fail the session."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import cli_synth as synth
import kbrun
import pytest

from pytest_kernelbench import plugin
from pytest_kernelbench.cli import main
from pytest_kernelbench.options import Settings
from pytest_kernelbench.report import diff as compare
from pytest_kernelbench.report import reading as reports
from pytest_kernelbench.run import ReportWriter


@pytest.fixture
def base(tmp_path):
    return synth.model_b(tmp_path, "base.json")            # all_reduce 1.2x, bands +-2 %


def _cli(*args) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "pytest_kernelbench.cli", *args], capture_output=True, text=True,
                          env=synth.env(), timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.e2e
def test_planted_speed_regression_exits_1(base, tmp_path):
    new = synth.model_b(tmp_path, "new.json", all_reduce=(0.9, 0.9))     # -25 %, bands far apart
    code, out = _cli("compare", str(base), str(new), "--fail-on=speedup:5%")
    assert code == 1, out
    assert "collective/all_reduce" in out and "REGRESSION" in out and "-25.0%" in out
    assert "FAILED: 2 regression(s)" in out                # the item and the GM over items passed in both


def test_delta_inside_the_noise_bands_exits_0(base, tmp_path):
    # -6.7 %, past the 5 % threshold, but the new run's rounds scatter +-10 %: the bands overlap
    new = synth.model_b(tmp_path, "new.json", all_reduce=(1.12, 1.12), width=0.10)
    result = compare.compare(reports.load(base), reports.load(new), compare.parse_fail_on("speedup:5%,pass"))
    assert not result.failed, result.lines()
    assert [d.change for d in result.items if d.problem == "collective/all_reduce"] == ["noise"]
    assert main.main(["compare", str(base), str(new)]) == 0      # default --fail-on=speedup:5%,pass


def test_an_error_in_new_is_retryable_not_a_lost_pass(base, tmp_path):
    """Issue 47: an item that passed in BASE and errored in NEW (harness_error: the infrastructure's)
    is no regression and does not lower NEW's pass rate; it is marked retryable."""
    new = synth.model_b(tmp_path, "new.json", ring="error")
    result = compare.compare(reports.load(base), reports.load(new), compare.parse_fail_on("pass"))
    assert not result.failed and result.regressions == []
    assert [d.change for d in result.items if d.problem == "p2p/ring_exchange"] == ["retryable"]
    pass_rate = next(a for a in result.aggregates if a[0] == "pass rate")
    assert pass_rate[1:] == (pytest.approx(2 / 3), pytest.approx(1 / 2))


def test_a_lost_pass_fails_only_when_asked(base, tmp_path):
    new = synth.model_b(tmp_path, "new.json", ring="failed")
    assert main.main(["compare", str(base), str(new), "--fail-on=pass"]) == 1
    assert main.main(["compare", str(base), str(new), "--fail-on=speedup:5%"]) == 0
    assert main.main(["compare", str(base), str(new), "--fail-on=none"]) == 0
    result = compare.compare(reports.load(base), reports.load(new), compare.parse_fail_on("pass"))
    assert result.regressions == ["p2p/ring_exchange: passed -> failed:mismatch"]
    pass_rate = next(a for a in result.aggregates if a[0] == "pass rate")
    assert pass_rate[1:] == (pytest.approx(2 / 3), pytest.approx(1 / 3))
    assert any("pass rate" in ln and "-33.3 points" in ln for ln in result.lines())


def test_cpu_runs_compare_by_outcome_only(tmp_path):
    same = compare.compare(reports.load(synth.cpu_reference(tmp_path, "a.json")),
                           reports.load(synth.cpu_reference(tmp_path, "b.json")), compare.parse_fail_on("speedup,pass"))
    assert not same.failed and {d.change for d in same.items} == {"no speed"}
    assert any(ln.startswith("GM-speedup") and "n/a" in ln for ln in same.lines())
    lost = compare.compare(reports.load(synth.cpu_reference(tmp_path, "c.json")),
                           reports.load(synth.cpu_reference(tmp_path, "d.json", ring="failed")),
                           compare.parse_fail_on("pass"))
    assert lost.failed


@pytest.mark.parametrize("text,expected", [("speedup:5%,pass", (0.05, True)), ("speedup:0.1", (0.1, False)),
                                           ("speedup", (0.05, False)), ("none", (None, False)), ("", (None, False))])
def test_fail_on_grammar(text, expected):
    f = compare.parse_fail_on(text)
    assert (f.speedup, f.passing) == (pytest.approx(expected[0]) if expected[0] else None, expected[1])


@pytest.mark.parametrize("text", ["speed:5%", "speedup:abc", "speedup:150%", "pass:3"])
def test_bad_fail_on_is_a_usage_error(base, text, capsys):
    assert main.main(["compare", str(base), str(base), f"--fail-on={text}"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


# ---- pytest: --kb-compare / --kb-compare-fail -----------------------------------------------------
class _Config:
    """What settings_from reads: the command-line values, no ini file."""

    def __init__(self, tmp_path, **opts):
        self.opts = {f"kb_{k}": v for k, v in opts.items()}
        self.rootpath = tmp_path

    def getoption(self, name):
        return self.opts.get(name)

    def getini(self, name):
        return None


@pytest.mark.parametrize("opts,message", [
    ({"compare_fail": "speedup:5%"}, "--kb-compare-fail needs --kb-compare=BASE"),
    ({"compare": "missing.json"}, "--kb-compare: missing.json: no such report"),
    ({"compare": "BASE", "compare_fail": "fast"}, "--kb-compare-fail: 'fast': expected"),
])
def test_compare_options_are_checked_up_front(base, tmp_path, opts, message):
    opts = {k: str(base) if v == "BASE" else v for k, v in opts.items()}
    with pytest.raises(pytest.UsageError, match=message):
        plugin.settings_from(_Config(tmp_path, **opts))
    ok = plugin.settings_from(_Config(tmp_path, compare=str(base), compare_fail="speedup:5%,pass"))
    assert (ok.compare, ok.compare_fail) == (str(base), "speedup:5%,pass")
    assert any(name == "compare" for name, *_ in plugin.OPTIONS) and any(n == "compare-fail" for n, *_ in plugin.OPTIONS)


def test_report_writer_prints_the_comparison_and_fails_a_passing_session(base, tmp_path):
    regressed = json.loads(synth.model_b(tmp_path, "new.json", all_reduce=(0.9, 0.9)).read_text())["items"]
    settings = Settings(compare=str(base), compare_fail="speedup:5%")
    run = SimpleNamespace(run_id="r", nonce="n", settings=settings, identity={}, machine=synth.H200, pkb=None,
                          json_path=tmp_path / "run.json", jsonl_path=tmp_path / "run.jsonl")
    writer = ReportWriter(run)
    writer.records = regressed
    session = SimpleNamespace(config=SimpleNamespace(invocation_params=SimpleNamespace(args=[])),
                              exitstatus=pytest.ExitCode.OK)
    writer.pytest_sessionfinish(session, session.exitstatus)
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
    shown = []
    tr = SimpleNamespace(write_sep=lambda sep, title: shown.append(title), write_line=shown.append)
    writer.pytest_terminal_summary(tr, session.exitstatus, None)
    assert "kernelbench compare" in shown
    assert any(ln.startswith("FAILED: 2 regression(s)") for ln in shown)
    # report only (no --kb-compare-fail): printed, the session's status untouched
    run.settings = Settings(compare=str(base))
    run.json_path, run.jsonl_path = tmp_path / "run2.json", tmp_path / "run2.jsonl"
    session.exitstatus = pytest.ExitCode.OK
    writer.pytest_sessionfinish(session, session.exitstatus)
    assert session.exitstatus == pytest.ExitCode.OK and writer.comparison.regressions == []


@pytest.mark.e2e
def test_kb_compare_in_a_real_run(tmp_path):
    """A real plugin run (a --kb-solutions file missing: no_code, nothing launched) against a base
    where that item passed: the comparison is printed under the summary."""
    problems, solutions = kbrun.make_tree(tmp_path, {"lost": "def solution(x):\n    return x\n"})
    (solutions / "collective" / "lost.py").unlink()
    base = synth.write(tmp_path / "base.json", [dict(synth.record("collective/all_reduce", "passed", device="cpu"),
                                                     problem="collective/lost")], synth.CPU, {})
    proc, doc = kbrun.run(tmp_path, str(problems), f"--kb-solutions={solutions}", f"--kb-compare={base}",
                          "--kb-compare-fail=pass", timeout=120)
    assert doc is not None and doc["items"][0]["failure"] == "no_code", proc.stdout[-3000:]
    out = proc.stdout
    assert "kernelbench compare" in out and "collective/lost: passed -> failed:no_code" in out, out[-3000:]
    assert proc.returncode == 1


def test_kb_compare_leaves_out_the_items_this_run_did_not_select(tmp_path):
    """Issue 45 (7): a run of one item against a full BASE listed every other item as "gone"."""
    def rec(n):
        return dict(synth.record("collective/all_reduce", "passed", device="cpu"), problem=f"collective/p{n}",
                    nodeid=f"p{n}")
    base = synth.write(tmp_path / "base.json", [rec(n) for n in range(5)], synth.CPU, {})
    new = {"items": [rec(0)], "path": "new.json"}
    cmp = compare.against(str(base), new, None)
    assert [(d.name, d.change) for d in cmp.items] == [("collective/p0", "no speed")]
    assert cmp.lines()[-2] == "items: 1 no speed; 4 of BASE not selected in this run (not compared)"
    # the CLI's two whole reports still say what went
    assert [d.change for d in compare.compare(reports.load(base), new).items].count("gone") == 4
