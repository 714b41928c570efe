"""What a new user reads (issue 45, point 7): a warning for model-only options given without a
model, the candidate's own file in failure output, and Ctrl-C that leaves a report, no orphan job
folder and a short message."""
from __future__ import annotations

import subprocess
import sys

import pytest
from kbrun import PROBLEMS, inner_env, make_tree, plugin_args, run

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
