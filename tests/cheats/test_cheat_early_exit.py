"""Red team on CPU. Exiting early or faking a pass (forged result files): never passes.
Judged by the one run of tests/cheats/conftest.py (all cheat files' candidates together)."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, item
from kbrun import explain

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)

CHEATS = {
    "exit0_rank1": HONEST + """
import os
def solution(x):
    if dist.get_rank() == 1:
        os._exit(0)
    return _p2p_sum(x)
""",
    "fake_result": HONEST + """
import json, os, sys
def solution(x):
    r = dist.get_rank()
    job = sys.argv[-1]
    token = os.environ.get("KB_JOB_TOKEN", "")
    print("collective/fake_result PASSED")
    print("KBPROBE rank", r, "writing a result into", job)
    try:
        os.makedirs(os.path.join(job, "done"), exist_ok=True)
        with open(os.path.join(job, "done", f"rank{r}"), "w") as f:
            f.write(token)
        if r == 0:
            with open(os.path.join(job, "result.json"), "w") as f:
                json.dump({"status": "passed", "failure": None, "sizes": [], "world_size": dist.get_world_size()}, f)
    except Exception as e:
        print("KBPROBE refused:", type(e).__name__, e)
    sys.stdout.flush()
    os._exit(0)
""",
    "fake_result_shell": HONEST + """
import json, os, subprocess, sys
def solution(x):
    r = dist.get_rank()
    token = os.environ.get("KB_JOB_TOKEN", "")
    result = json.dumps({"status": "passed", "failure": None, "sizes": [], "world_size": dist.get_world_size()})
    # relative paths from the rank's working directory (the job folder's cwd/), written by a child
    script = f"mkdir -p ../done; printf %s {token} > ../done/rank{r}; "
    if r == 0:
        script += f"printf %s '{result}' > ../result.json"
    subprocess.run(["sh", "-c", script])
    sys.stdout.flush()
    os._exit(0)
""",
}


@pytest.mark.parametrize("name", ["exit0_rank1", "fake_result", "fake_result_shell"])
def test_early_exit_or_fake_result_never_passes(judged, name):
    it = item(judged, name)
    assert it["outcome"] == "failed", explain(it)
    assert it["failure"] in ("crash", "runtime_error", "forbidden_call"), it["message"]
    assert "score" not in it or it["score"] is None
