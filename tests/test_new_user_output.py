"""What a new user reads (issue 45, point 7): a warning for model-only options given without a
model, the candidate's own file in failure output, and Ctrl-C that leaves a report, no orphan job
folder and a short message."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from kbrun import PROBLEMS, RING, inner_env, make_tree, plugin_args, run

pytestmark = pytest.mark.e2e      # every test here runs an inner pytest (tests/e2e_guard.py)


def test_model_only_options_without_a_model_warn():
    """--kb-samples and --kb-temperature were silently ignored without --kb-model."""
    cmd = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "--collect-only", "-q",
           str(PROBLEMS), "-k", "all_reduce", "--kb-samples=3", "--kb-temperature=0.5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=inner_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PytestConfigWarning: --kb-samples, --kb-temperature: read only with --kb-model" in proc.stdout, proc.stdout
    quiet = subprocess.run(cmd[:-2], capture_output=True, text=True, timeout=120, env=inner_env())
    assert "read only with --kb-model" not in quiet.stdout


def test_a_failure_names_the_candidates_own_file(tmp_path):
    """The traceback pointed at reports/<run>/jobs/<item>/candidate/solution.py, a copy the user
    does not edit."""
    problems, solutions = make_tree(tmp_path, {"boom": 'import torch\n\ndef solution(x):\n    raise ValueError("my bug")\n'})
    proc, doc = run(tmp_path, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timing=off")
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    item = doc["items"][0]
    mine = str(solutions / "collective" / "boom.py")
    assert item["failure"] == "runtime_error", item.get("message")
    assert f'File "{mine}", line 4, in solution' in item["message"], item["message"]
    assert f'File "{mine}", line 4, in solution' in proc.stdout
    assert "candidate/solution.py" not in proc.stdout + item["message"] + (item.get("log_tail") or "")


SLOW = RING.replace("def solution(x):", "import time\n\ndef solution(x):\n    time.sleep(0.5)")


def _interrupt(tmp_path, signals: int):
    """Ctrl-C (`signals` times, 0.3 s apart) once the first item's job folder exists."""
    problems, solutions = make_tree(tmp_path, {"slow": SLOW})
    report_path = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q", f"--kb-report={report_path}",
           str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timing=off", "--kb-trials=50"]
    # SIGINT as a terminal delivers it (a background job would inherit SIG_IGN: test_first_ten_minutes.py)
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=inner_env(), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    jobs = tmp_path / "report" / "jobs"
    end = time.monotonic() + 120
    while time.monotonic() < end and not any(jobs.glob("*/candidate")):
        time.sleep(0.1)
    time.sleep(2)                       # the ranks are under way
    for _ in range(signals):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
    out, _ = proc.communicate(timeout=120)
    return out, report_path, jobs


def test_ctrl_c_before_the_first_item_ends_leaves_a_report_and_no_job_folder(tmp_path):
    out, report_path, jobs = _interrupt(tmp_path, 1)
    assert report_path.exists(), out[-3000:]
    doc = json.loads(report_path.read_text())
    assert doc["items"] == [] and doc["interrupted"]["left"] == 1, doc.get("interrupted")
    assert not jobs.exists() or not any(jobs.iterdir()), list(jobs.iterdir())
    assert "INCOMPLETE" in out and "Traceback" not in out, out[-3000:]
    # nothing finished, so no JSONL to resume: the command given runs the same selection again
    assert "--kb-resume" not in doc["interrupted"]["resume"] and "--kb-report" not in doc["interrupted"]["resume"]
    assert "no item finished" in out


def test_a_second_ctrl_c_while_the_run_cleans_up_is_short(tmp_path):
    out, report_path, jobs = _interrupt(tmp_path, 3)
    assert "Traceback" not in out and len(out.splitlines()) < 25, out
