"""What a new user meets first (issue 20): the main job without numpy, a harness fault that is
not blamed on the candidate, a syntax error named in the user's own file, a deadlock in the first
call that meets the deadline (while a real compile in the first call still gets its budget), a
missing API key that costs seconds, `~` in path options, --kb-solutions-only, an interrupted run
that says so, and clean failure headlines."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kbrun import RING, by_problem, inner_env, make_tree, plugin_args, run

from pytest_kernelbench import report

# torch imports without numpy (a fresh `pip install torch` has none); torch.distributed's object
# collectives then fail with "Numpy is not available". Shadowing numpy reproduces that machine.
NO_NUMPY = 'raise ModuleNotFoundError("No module named \'numpy\' (hidden by the test)", name="numpy")\n'

HARNESS_FAULT = '''import torch
from pytest_kernelbench.harnesslib import exact_values
CALLS = [0]

def inputs(size, rank, world_size, gen, device, dtype):
    CALLS[0] += 1
    if CALLS[0] == 2:                 # the second trial's inputs: a bug in the harness itself
        raise ValueError("harness bug for the test")
    return (exact_values((size["n"],), gen, device, dtype),)

def cost(size, world_size, dtype):
    return {"link_bytes": 1.0, "hbm_bytes": 1.0, "flops": 1.0}
'''


def _hide_numpy(root: Path) -> str:
    fake = root / "no_numpy" / "numpy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(NO_NUMPY)
    return str(fake.parent)


@pytest.fixture(scope="module")
def fresh_machine(tmp_path_factory):
    """One run as on a machine without numpy: an honest candidate, a syntax error, a harness fault
    and a wrong answer."""
    root = tmp_path_factory.mktemp("fresh")
    problems, solutions = make_tree(root, {
        "good": RING,
        "syntax": RING.replace("def solution(x):", "def solution(x)"),
        "harness_fault": RING,
        "wrong": "import torch\n\ndef solution(x):\n    return torch.zeros_like(x)\n",
    })
    (problems / "collective" / "harness_fault" / "harness.py").write_text(HARNESS_FAULT)
    hidden = _hide_numpy(root)
    env = {"PYTHONPATH": os.pathsep.join([hidden, inner_env()["PYTHONPATH"]])}
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-keep-jobs",
                    "--kb-timing=off", env=env)
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root, solutions, proc, by_problem(doc)


@pytest.mark.e2e
def test_a_run_without_numpy_passes(fresh_machine):
    _, _, proc, items = fresh_machine
    good = items["collective/good"]
    assert good["outcome"] == "passed", good.get("message")
    assert "Numpy is not available" not in proc.stdout


@pytest.mark.e2e
def test_a_harness_fault_is_an_error_naming_the_harness_frame(fresh_machine):
    item = fresh_machine[3]["collective/harness_fault"]
    assert (item["outcome"], item["failure"]) == ("error", "harness_error"), item.get("message")
    assert "harness.inputs() failed" in item["message"] and "harness.py line 8 in inputs()" in item["message"], \
        item["message"]


@pytest.mark.e2e
def test_a_syntax_error_is_found_before_launch_in_the_users_file(fresh_machine):
    _, solutions, _, items = fresh_machine
    item = items["collective/syntax"]
    assert (item["outcome"], item["failure"]) == ("failed", "compile_error"), item.get("message")
    assert f"{solutions / 'collective' / 'syntax.py'}:3" in item["message"], item["message"]
    assert item.get("job_dir") is None and item.get("wall_s") is None    # no rank ever started


@pytest.mark.e2e
def test_failure_headlines_and_rank_logs_are_clean(fresh_machine):
    _, _, proc, items = fresh_machine
    assert "_ test_problem[collective/wrong] _" in proc.stdout, proc.stdout[-3000:]
    assert ".problems.collective" not in proc.stdout
    logs = "".join(p.read_text() for p in Path(items["collective/wrong"]["job_dir"]).glob("logs/*.log"))
    assert "TRACE_BUFFER_SIZE" not in logs and "deprecated" not in logs.lower(), logs[-2000:]


DEADLOCK = '''import time
import torch.distributed as dist

def solution(x):
    if dist.get_rank() == 0:
        while True:               # waits for a flag its peer never sets
            time.sleep(0.05)
    return x.clone()
'''

# the first call "compiles" for 30 s in a child process (as ninja/nvcc do) while the peer waits
COMPILES = RING.replace("def solution(x):", '''import subprocess, sys
_built = []

def solution(x):
    if not _built:
        _built.append(1)
        if dist.get_rank() == 0:
            subprocess.run([sys.executable, "-c",
                            "import time\\nt = time.time()\\nwhile time.time() - t < 30: pass"], check=True)
        dist.barrier()            # peers wait here (setup calls may communicate)
    return _ring(x)

def _ring(x):''')


@pytest.mark.e2e
def test_a_deadlock_in_the_first_call_meets_the_deadline_and_a_compile_its_budget(tmp_path):
    problems, solutions = make_tree(tmp_path, {"deadlock": DEADLOCK, "compiles": COMPILES})
    t0 = time.monotonic()
    proc, doc = run(tmp_path, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timeout=20",
                    "--kb-compile-timeout=600", "--kb-trials=1", "--kb-timing=off", "-p", "no:randomly", "-n", "2")
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    items = by_problem(doc)
    hung = items["collective/deadlock"]
    assert (hung["outcome"], hung["failure"]) == ("failed", "timeout"), hung.get("message")
    assert hung["message"].startswith('rank 0 stopped progressing in "size tiny, trial 0, candidate call'), \
        hung["message"]
    assert hung["wall_s"] <= 20 + 15, (hung["wall_s"], hung["message"])
    built = items["collective/compiles"]
    assert built["outcome"] == "passed", built.get("message")
    assert built["compile_s"] >= 20, built["compile_s"]
    assert time.monotonic() - t0 < 600


@pytest.mark.e2e
def test_solutions_only_runs_what_the_folder_holds_and_tilde_is_expanded(tmp_path):
    problems, solutions = make_tree(tmp_path, {"mine": RING, "other": RING})
    (solutions / "collective" / "other.py").unlink()
    home = tmp_path / "home"
    home.mkdir()
    solutions.rename(home / "kernels")
    args = (str(problems), "--kb-solutions=~/kernels", "--kb-nproc=2", "--kb-timing=off")
    proc, doc = run(tmp_path, *args, "--kb-solutions-only", env={"HOME": str(home)})
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    items = by_problem(doc)
    assert items["collective/mine"]["outcome"] == "passed", items["collective/mine"].get("message")
    assert items["collective/other"]["outcome"] == "skipped" and "--kb-solutions-only" in items["collective/other"]["message"]
    assert proc.returncode == 0, proc.stdout[-2000:]
    (tmp_path / "report.json").unlink()
    (tmp_path / "report.jsonl").unlink()
    proc, doc = run(tmp_path, *args, env={"HOME": str(home)})     # without it: the missing file is no_code
    assert by_problem(doc)["collective/other"]["failure"] == "no_code" and proc.returncode == 1


@pytest.mark.parametrize("model, key", [("openai/gpt-5", "OPENAI_API_KEY"), ("anthropic/claude-opus-4-7", "ANTHROPIC_API_KEY")])
@pytest.mark.e2e
def test_a_missing_api_key_is_a_usage_error_within_seconds(tmp_path, model, key):
    pytest.importorskip("litellm")
    env = {k: v for k, v in inner_env().items() if not k.endswith("_API_KEY")}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider",
                           str(Path(__file__).resolve().parent.parent / "problems"), "-k", "all_reduce",
                           f"--kb-model={model}"], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    took = time.monotonic() - t0
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("ERROR")]
    assert len(errors) == 1 and key in errors[0], proc.stderr[-2000:]
    assert took < 10, took
    assert not (tmp_path / "reports").exists()          # no rank, no report


def _needs_litellm() -> None:
    """Skip without litellm, without importing it here (importorskip would, before the plugin sets
    its offline price map, and litellm would then try to fetch one)."""
    from pytest_kernelbench.candidates.llm import available
    if not available():
        pytest.skip("litellm is not installed (pip install '.[llm]')")


def _free_port() -> int:
    """A port nothing listens on (bound, then closed: connecting to it is refused)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.e2e
def test_a_model_server_that_is_down_is_a_usage_error_within_seconds(tmp_path):
    """A local model server that is down cost every item ~85 s of retries ("HTTP 500 after 6
    attempts: Connection error"); a refused connection is known at once: one line before any item."""
    _needs_litellm()
    port = _free_port()
    env = {**inner_env(), "OPENAI_API_KEY": "stub-key"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider",
                           str(Path(__file__).resolve().parent.parent / "problems"), "-k", "all_reduce or all_gather",
                           "--kb-model=openai/kb-stub-model", f"--kb-api-base=http://127.0.0.1:{port}/v1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    took = time.monotonic() - t0
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("ERROR")]
    assert len(errors) == 1 and f"127.0.0.1:{port} (connection refused)" in errors[0], proc.stderr[-2000:]
    assert took < 10, took
    assert not (tmp_path / "reports").exists()


def test_the_api_probe_tells_a_listening_server_from_none():
    import socket

    from pytest_kernelbench.candidates.llm import unreachable
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert unreachable(f"http://127.0.0.1:{s.getsockname()[1]}/v1") is None
    port = _free_port()
    assert unreachable(f"http://127.0.0.1:{port}") == f"nothing listens at 127.0.0.1:{port} (connection refused)"
    assert "no host" in unreachable("http:///v1")


SLOW = RING.replace("def solution(x):", "import time\n\ndef solution(x):\n    time.sleep(0.5)")


@pytest.mark.e2e
def test_an_interrupted_run_is_marked_and_says_how_to_continue(tmp_path):
    problems, solutions = make_tree(tmp_path, {"a_first": RING, "b_slow": SLOW, "c_never": RING})
    report_path = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
           f"--kb-report={report_path}", str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2",
           "--kb-timing=off", "--kb-trials=20"]
    # as a terminal's pytest would: a suite started in the background (`cmd &` without job
    # control) ignores SIGINT, which its children inherit, and then Ctrl-C never reaches the run
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=inner_env(), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    jsonl = report_path.with_suffix(".jsonl")
    end = time.monotonic() + 300
    while time.monotonic() < end and not (jsonl.exists() and jsonl.read_text().count("\n") >= 1):
        time.sleep(0.2)
    time.sleep(3)                       # the slow item is under way
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    doc = json.loads(report_path.read_text())
    assert doc["interrupted"]["left"] == 2 and doc["interrupted"]["reason"].startswith("interrupted"), doc.get("interrupted")
    assert f"--kb-resume={jsonl}" in doc["interrupted"]["resume"] and "--kb-report" not in doc["interrupted"]["resume"]
    assert "INCOMPLETE" in out and f"--kb-resume={jsonl}" in out, out[-3000:]


def test_the_speed_line_says_why_there_is_no_speed():
    doc = {"aggregates": {"passed": 0, "total": 2, "failed": 2, "skipped": 0, "pass_rate": 0.0, "gm_speedup": None},
           "items": [{"device": "cuda", "outcome": "failed"}] * 2, "breakdowns": {},
           "config": {"settings": {"timing": True}}}
    assert "no item passed" in "\n".join(report.summary_lines(doc))
    doc["config"]["settings"]["timing"] = False
    assert "--kb-timing=off" in "\n".join(report.summary_lines(doc))


@pytest.mark.e2e
def test_a_model_server_that_goes_down_mid_run_stops_the_models_items(tmp_path, monkeypatch):
    """The server answered the probe, then went away: the first refused call is not retried for a
    minute, and the model's remaining items skip (the run's ledger, shared by xdist workers)."""
    _needs_litellm()
    from types import SimpleNamespace

    from pytest_kernelbench.candidates import llm
    monkeypatch.setenv("OPENAI_API_KEY", "stub-key")
    monkeypatch.setenv("KB_LLM_BACKOFF_S", "2")
    src = object.__new__(llm.ModelSource)
    src.settings = SimpleNamespace(max_cost=None, request_timeout=5, retries=5,
                                   api_base=f"http://127.0.0.1:{_free_port()}/v1")
    src.model, src.params, src.ledger = "openai/kb-stub-model", {}, llm.Ledger(tmp_path, None)
    llm.litellm_module()        # imported first: seconds on a loaded machine
    t0 = time.monotonic()
    with pytest.raises(llm.ApiFailure) as failed:
        src._call([{"role": "user", "content": "hi"}], {})
    assert time.monotonic() - t0 < 5 and failed.value.fatal and failed.value.info["attempts"] == 1
    assert "(connection refused)" in failed.value.message and "remaining items" in failed.value.message
    with pytest.raises(llm.Skipped, match="failed earlier in this run"):
        src.ledger.check(src.model)
