"""`kernelbench export`: one row per attempt (every sample and refinement round) with the prompt
the model saw, the candidate's code, outcome, per-size times and speedups, roofline, tokens and
cost; it round-trips, and no harness text gets out."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import cli_synth as synth
import pytest

from pytest_kernelbench.candidates import prompt
from pytest_kernelbench.cli import export, main

HARNESS = '''import torch

def check(out, expected_from_secret_inputs):
    hidden_expected = expected_from_secret_inputs.clone().mul_(2).add_(7)   # never shown
    assert torch.allclose(out, hidden_expected), "mismatch against the hidden expectation"
'''
TRACEBACK = ('rank 1 mismatch at size s0\n'
             'Traceback (most recent call last):\n'
             '  File "/job/problems/collective/all_reduce/harness.py", line 4, in check\n'
             '    hidden_expected = expected_from_secret_inputs.clone().mul_(2).add_(7)   # never shown\n'
             'AssertionError: max abs err 0.5')


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """model-a's run with the files a model run keeps: prompts/ and candidates/ under the run folder."""
    tmp = tmp_path_factory.mktemp("export")
    src = synth.model_a(tmp)
    records = [json.loads(ln) for ln in src.with_suffix(".jsonl").read_text().splitlines()]
    run_dir = tmp / "model-a-files"
    for r in records:
        stem = f"{r['problem'].replace('/', '__')}-s{r['sample']}-r{r['round']}"
        chat = [{"role": "system", "content": "You write multi-GPU kernels."},
                {"role": "user", "content": f"Write solution() for {r['problem']}.\n\n<!-- not a role -->"}]
        if r["round"] > 1:
            chat += [{"role": "assistant", "content": "```python\ndef solution(x):\n    return x\n```"},
                     {"role": "user", "content": "It failed: mismatch.\n"}]
        (run_dir / "prompts").mkdir(parents=True, exist_ok=True)
        (run_dir / "prompts" / f"{stem}.md").write_text(prompt.render(chat))
        code = f"def solution(x):\n    return x  # {stem}\n"
        (run_dir / "candidates").mkdir(parents=True, exist_ok=True)
        (run_dir / "candidates" / f"{stem}.py").write_text(code)
        r["llm"]["prompt_file"] = f"/elsewhere/{run_dir.name}/prompts/{stem}.md"      # the report was moved
        r["candidate"].update(origin=f"/elsewhere/{run_dir.name}/candidates/{stem}.py",
                              sha256=hashlib.sha256(code.encode()).hexdigest())
        r["expected_chat"] = chat
        if r["problem"] == "collective/all_reduce" and r.get("failure") == "mismatch":
            r.update(message=TRACEBACK, log_tail="harness.py line 4: secret", job_dir="/job", rank_phases={"0": "x"})
    path = synth.write(tmp / "model-a-files.json", records, synth.H200, {"model": "prov/model-a"})
    problems = tmp / "problems"
    (problems / "collective" / "all_reduce").mkdir(parents=True)
    (problems / "collective" / "all_reduce" / "harness.py").write_text(HARNESS)
    return path, problems, records


def test_one_row_per_attempt_with_what_training_needs(run):
    path, problems, records = run
    rows = export.rows([path], problems)
    assert len(rows) == len(records) == 9          # 6 samples, 3 of them with a second round
    by = {(r["problem"], r["sample"], r["round"]): r for r in rows}
    retried = by[("collective/all_reduce", 1, 2)]
    assert retried["outcome"] == "passed" and retried["best"] is True and retried["model"] == "prov/model-a"
    assert retried["score"] == pytest.approx(2.0) and retried["verdict"] == "better"
    assert [s["speedup"] for s in retried["sizes"]] == [4.0, 1.0]
    assert retried["sizes"][0]["t_ref_s"] / retried["sizes"][0]["t_cand_s"] == pytest.approx(4.0)
    assert retried["roofline"] == {"reference": 0.3, "candidate": pytest.approx(0.6)}
    assert retried["tokens"] == {"prompt": 200, "completion": 100} and retried["usd"] == 0.01
    assert retried["sample_cost"]["usd"] == pytest.approx(0.02)
    assert retried["category"] == "collective" and retried["parallelism"] == ["tp", "dp"]
    expected = {(r["problem"], r["sample"], r["round"]): r for r in records}
    for key, row in by.items():
        assert row["prompt"] == expected[key]["expected_chat"]         # the chat file, parsed back
        assert row["code"].endswith(f"-s{key[1]}-r{key[2]}\n")        # found in the moved run folder
    assert by[("fusion/matmul_reduce_scatter", 1, 1)]["failure"] == "api_error"


def test_export_round_trips_and_holds_no_harness_text(run, tmp_path):
    path, problems, _ = run
    out = tmp_path / "rows.jsonl"
    assert main.main(["export", str(path), "--format", "jsonl", "-o", str(out), "--problems", str(problems)]) == 0
    back = export.read(out)
    assert back == json.loads(json.dumps(export.rows([path], problems)))
    text = out.read_text()
    for line in HARNESS.splitlines():
        if len(line.strip()) >= 12 and not line.startswith("import"):
            assert line.strip() not in text
    assert "harness.py" not in text and "secret" not in text
    assert not {"log_tail", "job_dir", "rank_phases"} & set(back[0])
    message = next(r["message"] for r in back if r["failure"] == "mismatch" and r["problem"] == "collective/all_reduce")
    assert message.splitlines()[0] == "rank 1 mismatch at size s0" and prompt.HIDDEN_LINE in message
    assert message.splitlines()[-1] == "AssertionError: max abs err 0.5"


def test_without_the_problem_tree_lines_naming_the_harness_still_go(run, capsys):
    path, _, _ = run
    rows = export.rows([path], run[1].parent / "no-problems-here")
    message = next(r["message"] for r in rows if r["failure"] == "mismatch" and r["problem"] == "collective/all_reduce")
    assert "harness.py" not in message
    assert "no harness.py under" in capsys.readouterr().err


def test_code_that_changed_since_the_run_is_not_exported(run, tmp_path):
    path, problems, records = run
    victim = path.with_suffix("") / "candidates" / "p2p__ring_exchange-s0-r1.py"
    kept = victim.read_text()
    victim.write_text(kept + "# edited later\n")
    try:
        rows = export.rows([path], problems)
    finally:
        victim.write_text(kept)
    assert next(r for r in rows if r["problem"] == "p2p/ring_exchange" and r["sample"] == 0)["code"] is None


def test_parquet_round_trip_when_pyarrow_is_there(run, tmp_path):
    pytest.importorskip("pyarrow")
    path, problems, _ = run
    out = tmp_path / "rows.parquet"
    assert main.main(["export", str(path), "--format", "parquet", "-o", str(out), "--problems", str(problems)]) == 0
    assert export.read(out) == json.loads(json.dumps(export.rows([path], problems)))


@pytest.mark.e2e
def test_parquet_without_pyarrow_is_one_clear_line(run, tmp_path):
    code = ("import sys; sys.modules['pyarrow'] = None; from pytest_kernelbench.cli.main import main; "
            f"sys.exit(main(['export', {str(run[0])!r}, '--format', 'parquet', '-o', {str(tmp_path / 'x.parquet')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=synth.env(), timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == f"kernelbench export: {export.PYARROW_MISSING}"
