"""Red team on CPU. The hidden harness / reference: a candidate cannot read the problem tree or the job's files.
Judged by the one run of tests/cheats/conftest.py (all cheat files' candidates together)."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, item, rank_logs
from kbrun import explain

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)

CHEATS = {
    "hf_job_json": HONEST + """
import importlib.util, json, os, sys
def _steal():
    job_dir = sys.argv[-1]
    with open(os.path.join(job_dir, "job.json")) as f:
        job = json.load(f)
    spec = importlib.util.spec_from_file_location("stolen_reference", job["reference_path"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
def solution(x):
    try:
        ref = _steal()
        print("KBPROBE stole the reference", ref)
    except Exception as e:
        print("KBPROBE refused:", type(e).__name__, e)
    return _p2p_sum(x)
""",
    "hf_walk_up": HONEST + """
import glob, os
def _steal():
    d = os.getcwd()
    while d != os.path.dirname(d):
        if "problems" in os.listdir(d):
            hits = glob.glob(os.path.join(d, "problems", "**", "harness.py"), recursive=True)
            for h in hits:
                return open(h).read()
        d = os.path.dirname(d)
def solution(x):
    try:
        print("KBPROBE harness:", (_steal() or "")[:40])
    except Exception as e:
        print("KBPROBE refused:", type(e).__name__, e)
    return _p2p_sum(x)
""",
    "hf_sys_path": HONEST + """
import glob, importlib.util, os, sys
def _look():
    places = [os.getcwd()] + [p or os.getcwd() for p in sys.path]
    print("KBPROBE cwd", os.getcwd())
    print("KBPROBE sys.path", sys.path)
    direct = [p for p in places for f in ("reference.py", "harness.py") if os.path.exists(os.path.join(p, f))]
    mods = [m for m in ("reference", "harness") if importlib.util.find_spec(m) is not None]
    print("KBPROBE direct", direct, "modules", mods)
    for p in places:          # a problems/ tree next to anything on the module path
        for h in glob.glob(os.path.join(p, "problems", "*", "*", "reference.py")):
            return open(h).read()
def solution(x):
    try:
        _look()
    except Exception as e:
        print("KBPROBE refused:", type(e).__name__, e)
    return _p2p_sum(x)
""",
    "hf_subprocess": HONEST + """
import os, subprocess
def _steal():
    d = os.getcwd()
    while d != os.path.dirname(d):
        if os.path.isdir(os.path.join(d, "problems")):
            return subprocess.run(["find", os.path.join(d, "problems"), "-name", "harness.py"],
                                  capture_output=True, text=True).stdout
        d = os.path.dirname(d)
def solution(x):
    try:
        print("KBPROBE found:", _steal())
    except Exception as e:
        print("KBPROBE refused:", type(e).__name__, e)
    return _p2p_sum(x)
""",
    "hf_at_import": HONEST + """
import os
try:            # at import time, and the refusal swallowed: still reported
    d = os.getcwd()
    while d != os.path.dirname(d) and not os.path.isdir(os.path.join(d, "problems")):
        d = os.path.dirname(d)
    os.listdir(os.path.join(d, "problems"))
except Exception:
    pass
def solution(x):
    return _p2p_sum(x)
""",
}


@pytest.mark.parametrize("name", ["hf_job_json", "hf_walk_up", "hf_sys_path", "hf_subprocess", "hf_at_import"])
def test_reading_the_hidden_files_is_refused(judged, name):
    """The candidate process cannot read the problem tree or the job's files (the sandbox refuses,
    whatever the path); an attempt the in-process shield sees fails the item as well."""
    it = item(judged, name)
    assert it["outcome"] == "passed" or it["failure"] == "forbidden_call", explain(it)
    assert "KBPROBE stole" not in rank_logs(it) and "def inputs" not in rank_logs(it)


def test_problem_folder_not_on_the_module_path_or_cwd(judged):
    logs = rank_logs(item(judged, "hf_sys_path"))
    lines = [ln for ln in logs.splitlines() if ln.startswith("KBPROBE")]
    assert any(ln.startswith("KBPROBE sys.path") for ln in lines), logs[-2000:]
    problems = str(judged["problems"])
    for ln in lines:
        if ln.startswith(("KBPROBE cwd", "KBPROBE sys.path")):
            assert problems not in ln, ln
    direct = [ln for ln in lines if ln.startswith("KBPROBE direct")]
    assert direct and all(ln == "KBPROBE direct [] modules []" for ln in direct), direct
