"""pytest-timeout stays usable as an outer net: when it fires first, the job still dies."""
from __future__ import annotations

import time

import pytest
from kbrun import leftover_processes, make_tree, run

pytestmark = pytest.mark.e2e      # every test here runs an inner pytest or ranks (tests/e2e_guard.py)

HANG = "import time\ndef solution(x):\n    while True:\n        time.sleep(0.01)\n"


def test_pytest_timeout_fires_first_and_no_process_is_left(tmp_path):
    problems, solutions = make_tree(tmp_path, {"hang": HANG})
    t0 = time.monotonic()
    proc, _ = run(tmp_path, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timeout=120",
                  "--timeout=12")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Timeout" in out, out[-3000:]
    assert time.monotonic() - t0 < 60
    time.sleep(1)
    assert not leftover_processes(str(tmp_path))
