"""A run cut short by kill -9 keeps every finished item and resumes; user mistakes are one line."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from kbrun import by_problem, inner_env, leftover_processes, make_tree, plugin_args, run

pytestmark = pytest.mark.e2e      # every test here runs an inner pytest or ranks (tests/e2e_guard.py)

GOOD = "import torch.distributed as dist\ndef solution(x):\n    out = x.clone()\n    dist.all_reduce(out)\n    return out\n"
# slow once, at import: a window holds as many calls as ~10 ms of the reference's take, so a
# candidate slow in every call is slow by however fast gloo was in the reference's probes (0.5 s a
# call once made a window of ~100 calls under CI load, and the resumed item met its deadline)
SLOW = "import time\nimport torch.distributed as dist\ntime.sleep(4)\ndef solution(x):\n" \
       "    out = x.clone()\n    dist.all_reduce(out)\n    return out\n"


def test_kill_9_keeps_finished_items_and_resume_completes_the_run(tmp_path):
    names = {"a_fast": GOOD, "b_slow": SLOW, "c_slow": SLOW}
    problems, solutions = make_tree(tmp_path, names, yaml_patch={"forbid": []})
    report = tmp_path / "r.json"
    jsonl = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q", str(problems),
           f"--kb-solutions={solutions}", "--kb-nproc=2", f"--kb-report={report}"]
    env = inner_env()
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if jsonl.exists() and jsonl.read_text().count("\n") >= 1:
            break
        time.sleep(0.2)
    time.sleep(1.0)                                # the next item's job is now running
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    first = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert 1 <= len(first) < 3 and all(r["outcome"] == "passed" for r in first)
    assert not report.exists()                      # the run never finished
    time.sleep(1.0)
    assert not leftover_processes(str(tmp_path)), "the killed run's job must die with it"

    proc2, _ = run(tmp_path, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2",
                   f"--kb-resume={jsonl}")
    assert proc2.returncode == 0, proc2.stdout + proc2.stderr
    doc = json.loads(report.read_text())           # --kb-resume writes the run's own JSON
    assert f"{len(first)} deselected" in proc2.stdout
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(lines) == 3 and len({r["nodeid"] for r in lines}) == 3   # nothing ran twice
    assert sorted(by_problem(doc)) == [f"collective/{n}" for n in sorted(names)]
    assert doc["aggregates"]["passed"] == 3


ASLEEP = "import sys, time\nimport torch.distributed as dist\n_n = [0]\ndef solution(x):\n" \
         "    _n[0] += 1\n    if _n[0] > 2:\n        print('KB-ASLEEP', flush=True)\n        time.sleep(120)\n" \
         "    out = x.clone()\n    dist.all_reduce(out)\n    return out\n"


def test_kill_9_ends_a_candidate_process_in_the_middle_of_a_call(tmp_path):
    # the fork that makes the candidate process clears the checker's death signal: killed with
    # the run, the checker left its candidate process sleeping in its call (a batch of slow calls
    # once outlived the run by seconds, which the test above met under load)
    problems, solutions = make_tree(tmp_path, {"asleep": ASLEEP}, yaml_patch={"forbid": []})
    cmd = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q", str(problems),
           f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-keep-jobs", f"--kb-report={tmp_path / 'r.json'}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=inner_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any("KB-ASLEEP" in p.read_text(errors="replace")
                                                    for p in tmp_path.rglob("rank*.log")):
        time.sleep(0.2)
    assert time.monotonic() < deadline, "the candidate never reached its third call"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    end = time.monotonic() + 3.0
    while leftover_processes(str(tmp_path)) and time.monotonic() < end:
        time.sleep(0.1)
    assert not leftover_processes(str(tmp_path)), "the killed run's candidate process must die with it"


def test_unknown_option_value_is_one_line(tmp_path):
    proc, _ = run(tmp_path, "--kb-device=tpu")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4 and "--kb-device='tpu': expected auto, cpu or cuda" in out and "Traceback" not in out
    proc, _ = run(tmp_path, "--kb-candidate=best")
    assert "--kb-candidate='best': expected auto, reference, shipped or shipped:NAME" in proc.stdout + proc.stderr
    proc, _ = run(tmp_path, "--kb-trials=zero")
    assert "--kb-trials='zero': expected int" in proc.stdout + proc.stderr


def test_solutions_directory_without_the_problem_fails_clearly(tmp_path):
    problems, _ = make_tree(tmp_path, {"p": GOOD})
    empty = tmp_path / "mine"
    empty.mkdir()
    proc, _ = run(tmp_path, str(problems), f"--kb-solutions={empty}", "--kb-nproc=2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert f"{empty}/collective/p.py: no candidate for collective/p" in out and "Traceback" not in out


def test_missing_harness_function_is_a_one_line_collection_error(tmp_path):
    problems, solutions = make_tree(tmp_path, {"p": GOOD})
    (problems / "collective" / "p" / "harness.py").write_text("def inputs(size, rank, world_size, gen, device, dtype):\n    return ()\n")
    proc, _ = run(tmp_path, str(problems), f"--kb-solutions={solutions}")
    out = proc.stdout + proc.stderr
    assert "collective/p/harness.py: missing function 'cost()'" in out and "Traceback" not in out
