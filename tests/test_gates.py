"""Gates in a developer's units: --kb-min-busbw, --kb-max-latency (metrics/gates.py) and the
per-size terms of --kb-compare-fail / `kernelbench compare --fail-on` (latency, busbw): each fails
on a planted regression and passes otherwise (synthetic records, tests/cli_synth.py)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import cli_synth as synth
import pytest

from pytest_kernelbench import plugin
from pytest_kernelbench.cli import main
from pytest_kernelbench.metrics import gates
from pytest_kernelbench.options import Settings
from pytest_kernelbench.report import diff as compare
from pytest_kernelbench.report import reading as reports
from pytest_kernelbench.run import ReportWriter

# all_reduce over 4 ranks, sizes s0 (1024 bf16 = 2K) and s1 (4K); reference 1 ms a call
S1 = 2048 * 2


def rec(speedups=(1.0, 1.0), width=0.02, **kw):
    return synth.record("collective/all_reduce", "passed", list(speedups), width=width, collective="all_reduce", **kw)


def busbw(t_s: float, nbytes: int = S1) -> float:
    return nbytes / t_s / 1e9 * 2 * 3 / 4


def test_gate_grammar():
    assert gates.parse("300", "busbw") == [gates.Gate("busbw", 300.0)]
    assert gates.parse("collective/*@256M=350, 20", "busbw") == [gates.Gate("busbw", 350.0, "collective/*", "256M"),
                                                                 gates.Gate("busbw", 20.0)]
    assert gates.parse("*@8K=20us,x=1.5ms,2e-3s", "latency") == [
        gates.Gate("latency", pytest.approx(20e-6), "*", "8K"), gates.Gate("latency", pytest.approx(1.5e-3), "x"),
        gates.Gate("latency", pytest.approx(2e-3))]
    assert gates.parse_bytes("256M") == 256 << 20 and gates.parse_bytes("8k") == 8192 and gates.parse_bytes("x") is None
    for bad, kind in (("fast", "busbw"), ("=-1", "busbw"), ("@=3", "busbw"), ("20 min", "latency"), ("0", "latency")):
        with pytest.raises(ValueError):
            gates.parse(bad, kind)


def test_min_busbw_fails_a_planted_regression_and_passes_otherwise():
    fast, slow = rec((1.0, 1.0)), rec((1.0, 0.5))       # s1: candidate 2 ms instead of 1 ms
    bound = busbw(1.5e-3)                                # between the two
    g = gates.parse(f"*@4K={bound}", "busbw")
    assert gates.misses(fast, g) == []
    (miss,) = gates.misses(slow, g)
    assert miss.startswith("collective/all_reduce@4K: busbw") and f"< {bound:g} GB/s" in miss
    # without @SIZE: the mean over sizes (nccl-tests' Avg bus bandwidth)
    mean = (busbw(1e-3, 2048) + busbw(1e-3)) / 2
    assert gates.misses(fast, gates.parse(f"{mean * 0.99}", "busbw")) == []
    assert "mean over 2 size(s)" in gates.misses(fast, gates.parse(f"{mean * 1.01}", "busbw"))[0]
    # a glob that names another item, a problem without busbw, a CPU item, a failed item: not gated
    assert gates.misses(slow, gates.parse(f"p2p/*={bound}", "busbw")) == []
    assert gates.misses({**slow, "sizes": [{k: v for k, v in s.items() if k != "busbw_GBps"} for s in slow["sizes"]]},
                        g) == []
    assert gates.misses({**slow, "device": "cpu"}, g) == []
    assert gates.misses({**slow, "outcome": "failed"}, g) == []


def test_max_latency_fails_a_planted_regression_and_passes_otherwise():
    g = gates.parse("collective/all_reduce@s1=1.5ms", "latency")
    assert gates.misses(rec((1.0, 1.0)), g) == []
    assert gates.misses(rec((1.0, 0.5)), g) == ["collective/all_reduce@s1: latency 2000.0 us > 1500 us"]
    assert len(gates.misses(rec((0.5, 0.5)), gates.parse("1500", "latency"))) == 2      # every size


def _writer(tmp_path, records, **opts):
    run = SimpleNamespace(run_id="r", nonce="n", settings=Settings(**opts), identity={}, machine=synth.H200, pkb=None,
                          json_path=tmp_path / "run.json", jsonl_path=tmp_path / "run.jsonl")
    writer = ReportWriter(run)
    writer.records = records
    session = SimpleNamespace(config=SimpleNamespace(invocation_params=SimpleNamespace(args=[])),
                              exitstatus=pytest.ExitCode.OK)
    writer.pytest_sessionfinish(session, session.exitstatus)
    shown = []
    tr = SimpleNamespace(write_sep=lambda sep, title: shown.append(title), write_line=shown.append)
    writer.pytest_terminal_summary(tr, session.exitstatus, None)
    return session.exitstatus, shown, json.loads(run.json_path.read_text())


def test_gates_fail_the_session_and_mark_the_item(tmp_path):
    status, shown, doc = _writer(tmp_path, [rec((1.0, 0.5))], max_latency="@s1=1.5ms", min_busbw="0.001")
    assert status == pytest.ExitCode.TESTS_FAILED
    assert "kernelbench gates" in shown and any(ln.startswith("FAILED: 1 gate(s) missed") for ln in shown)
    assert doc["items"][0]["gates"] == ["collective/all_reduce@s1: latency 2000.0 us > 1500 us"]
    status, shown, doc = _writer(tmp_path / "ok", [rec((1.0, 1.0))], max_latency="@s1=1.5ms", min_busbw="0.001")
    assert status == pytest.ExitCode.OK and "every gated item within its bounds" in shown
    assert "gates" not in doc["items"][0]


def test_bad_gate_options_are_usage_errors(tmp_path):
    class Config:
        rootpath = tmp_path

        def __init__(self, **o):
            self.o = {f"kb_{k}": v for k, v in o.items()}

        def getoption(self, name):
            return self.o.get(name)

        def getini(self, name):
            return None
    with pytest.raises(pytest.UsageError, match="--kb-min-busbw: 'fast'"):
        plugin.settings_from(Config(min_busbw="fast"))
    with pytest.raises(pytest.UsageError, match="--kb-max-latency: "):
        plugin.settings_from(Config(max_latency="20min"))
    assert plugin.settings_from(Config(min_busbw="300", max_latency="*@8K=20us")).min_busbw == "300"


# ---- compare: latency and throughput per size ------------------------------------------------------
def _docs(tmp_path, base, new):
    b = synth.write(tmp_path / "base.json", [base], synth.H200, {})
    n = synth.write(tmp_path / "new.json", [new], synth.H200, {})
    return b, n


def test_compare_fails_on_a_latency_or_busbw_regression_per_size(tmp_path, capsys):
    b, n = _docs(tmp_path, rec((1.0, 1.0)), rec((1.0, 0.8)))       # s1: 1.0 -> 1.25 ms, busbw -20 %
    assert main.main(["compare", str(b), str(n), "--fail-on=latency:15%"]) == 1
    out = capsys.readouterr().out
    assert "collective/all_reduce@s1: latency 1000.0 -> 1250.0 us" in out
    assert "base us" in out and "busbw -20.0%" in out and "latency REGRESSION" in out
    assert main.main(["compare", str(b), str(n), "--fail-on=busbw:5%"]) == 1
    assert "collective/all_reduce@s1: busbw" in capsys.readouterr().out
    assert main.main(["compare", str(b), str(n), "--fail-on=latency:30%"]) == 0       # +25 % is within 30 %
    assert main.main(["compare", str(b), str(n), "--fail-on=pass"]) == 0


def test_compare_per_size_passes_an_unchanged_run_and_noise(tmp_path):
    b, n = _docs(tmp_path, rec((1.0, 1.0)), rec((1.0, 1.0)))
    assert main.main(["compare", str(b), str(n), "--fail-on=latency,busbw"]) == 0
    # +7 % time, past 5 %, but the rounds scatter +-10 %: the medians' bands overlap
    b, n = _docs(tmp_path / "noise", rec((1.0, 1.0), width=0.10), rec((1.0, 1 / 1.07), width=0.10))
    result = compare.compare(reports.load(b), reports.load(n), compare.parse_fail_on("latency:5%,busbw:5%"))
    assert not result.failed, result.lines()
    assert {(s.size, s.latency, s.throughput) for s in result.sizes} == {("s0", "noise", "noise"), ("s1", "noise", "noise")}


def test_compare_per_size_table_in_developer_units(tmp_path, capsys):
    b, n = _docs(tmp_path, rec((1.0, 1.0)), rec((1.0, 1.0)))
    assert main.main(["compare", str(b), str(n), "--per-size", "--fail-on=none"]) == 0
    out = capsys.readouterr().out
    head = next(ln for ln in out.splitlines() if ln.startswith("item ") and "base us" in ln)
    for col in ("size", "bytes", "new us", "latency", "base GB/s", "new GB/s", "bandwidth"):
        assert col in head
    row = next(ln for ln in out.splitlines() if "@" not in ln and " s1 " in ln)
    assert " 4K " in row and "1000.0" in row and f"{busbw(1e-3):.1f}" in row


@pytest.mark.parametrize("text,expected", [("latency", (0.15, None)), ("busbw", (None, 0.05)),
                                           ("latency:10%,busbw:0.02", (0.10, 0.02))])
def test_fail_on_grammar_per_size(text, expected):
    f = compare.parse_fail_on(text)
    assert (f.latency, f.throughput) == tuple(pytest.approx(x) if x else None for x in expected)
    with pytest.raises(ValueError, match="latency:abc"):
        compare.parse_fail_on("latency:abc")
