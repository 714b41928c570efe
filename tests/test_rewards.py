"""Reward presets (metrics/rewards.py) on known records, and `kernelbench reward` recomputing them
from a stored report: a cheat is the fixed penalty whatever the preset, a retryable or skipped record
has no reward (None), never 0."""
from __future__ import annotations

import json
import math

import cli_synth as synth
import pytest

from pytest_kernelbench.cli import main
from pytest_kernelbench.metrics import rewards
from pytest_kernelbench.protocol import Failure


def rec(outcome: str, failure: str | None = None, score: float | None = None) -> dict:
    return {"problem": "collective/all_reduce", "outcome": outcome, "failure": failure, "score": score}


FAST = rec("passed", score=2.0)
SLOW = rec("passed", score=0.9)
VERY_FAST = rec("passed", score=8.0)
CPU = rec("passed")                           # CPU: speed not measured (score None)
WRONG = rec("failed", "mismatch")
CHEAT = rec("failed", "forbidden_call")
HARNESS = rec("error", "harness_error")
SKIPPED = rec("skipped")

# preset -> the reward of FAST, SLOW, VERY_FAST, CPU, WRONG
EXPECTED = {
    "binary": (1.0, 1.0, 1.0, 1.0, 0.0),
    "fast_p": (1.0, 0.0, 1.0, 0.0, 0.0),
    "log_speedup": (1 + math.log(2.0), 1 + math.log(0.9), 1 + math.log(4.0), 1.0, 0.0),
    "kevin": (2.3, 1.2, 8.3, 0.3, 0.0),
    "drkernel": (2.0, 1.0, 2.0, 1.0, 0.0),
}


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_each_preset_on_known_records(preset):
    got = tuple(rewards.reward(r, preset) for r in (FAST, SLOW, VERY_FAST, CPU, WRONG))
    assert got == pytest.approx(EXPECTED[preset])
    assert rewards.reward(CHEAT, preset) == rewards.CHEAT_PENALTY == -1.0
    assert rewards.reward(HARNESS, preset) is None and rewards.reward(SKIPPED, preset) is None
    entry = rewards.reward_entry(FAST, preset)
    assert entry["preset"] == preset and entry["version"] >= 1


def test_every_cheat_verdict_is_the_penalty_below_any_honest_failure():
    for cheat in (Failure.FORBIDDEN_CALL, Failure.UNSAFE, Failure.EDIT_OUTSIDE_REGION, Failure.REFERENCE_COPY,
                  Failure.FORBIDDEN_CONSTRUCT):
        for preset in rewards.PRESETS:
            assert rewards.reward(rec("failed", cheat), preset) == -1.0
            assert rewards.reward(rec("failed", cheat), preset) < rewards.reward(WRONG, preset)
    # an honest failure of any kind is not a cheat
    for honest in ("no_code", "compile_error", "runtime_error", "crash", "mismatch", "timeout"):
        assert not rewards.components(rec("failed", honest))["cheat"]


def test_a_slow_correct_kernel_still_beats_a_failure():
    for preset in ("binary", "log_speedup", "kevin", "drkernel"):
        assert rewards.reward(rec("passed", score=0.01), preset) > rewards.reward(WRONG, preset)


def test_components_of_a_retryable_record_have_no_verdict():
    c = rewards.components(HARNESS)
    assert c["disposition"] == "retryable" and c["correct"] is None and not c["cheat"]
    assert rewards.components(CPU)["speed_measured"] is False


def test_unknown_preset_is_a_usage_error():
    with pytest.raises(ValueError, match="unknown reward preset"):
        rewards.reward(FAST, "nope")


def test_kernelbench_reward_recomputes_from_a_stored_report(tmp_path, capsys):
    report = synth.model_b(tmp_path, "b.json", ring="error")       # all_reduce 1.2x, ring harness_error
    out_json = tmp_path / "rewards.json"
    assert main.main(["reward", str(report), "--preset", "kevin", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("reward preset kevin v1:")
    assert "collective/all_reduce: 1.500" in out                 # 0.3 + 1.2
    assert "p2p/ring_exchange: -  (retryable)" in out
    assert "fusion/matmul_reduce_scatter: 0.000" in out
    assert "1 retryable (no reward: run again)" in out
    rows = {r["problem"]: r for r in json.loads(out_json.read_text())}
    assert rows["p2p/ring_exchange"]["value"] is None and rows["p2p/ring_exchange"]["disposition"] == "retryable"
    assert rows["collective/all_reduce"] == {**rows["collective/all_reduce"], "preset": "kevin", "version": 1,
                                             "value": pytest.approx(1.5)}
    with pytest.raises(SystemExit) as bad:      # an unknown preset: argparse's usage error
        main.main(["reward", str(report), "--preset", "nope"])
    assert bad.value.code == 2


def test_kernelbench_reward_reads_a_file_of_evaluations(tmp_path, capsys):
    lines = [{"id": "a", "record": FAST}, {"id": "b", "record": CHEAT}, {"id": "c", "record": HARNESS}]
    path = tmp_path / "evals.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert main.main(["reward", str(path), "--preset", "binary"]) == 0
    out = capsys.readouterr().out
    assert "mean reward 0.000 over 2 record(s) with a verdict; 1 retryable" in out
