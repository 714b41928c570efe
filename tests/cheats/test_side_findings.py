"""Issue 44's side findings, judged by one run of the real plugin (CPU, gloo, W=2, fork launcher):

- a reference that fails inside the checker was reported as the candidate's runtime_error;
- the zygote's launcher secret was readable in the candidate process, through the serve() frame
  its checker was forked from (and in the heap copies of the lines it had parsed).

(The checkers' store is tested without a run: tests/test_checker_store.py.)
"""
from __future__ import annotations

import pytest
from cheatlib import HONEST, rank_logs
from kbrun import by_problem, explain, make_tree, run

pytestmark = pytest.mark.e2e

HONEST_SOLUTION = HONEST + "\ndef solution(x):\n    return _p2p_sum(x)\n"

# the candidate looks for the launcher's secret where its process holds what the zygote held:
# the frames below its own (serve(), _spawn(): their locals, and what they refer to), then every
# writable mapping of its own memory, for the launcher's request lines; it prints what it finds
SECRET_HUNT = HONEST + r'''
import re, sys
_found = set()
def _look(v, depth=0):
    if isinstance(v, str) and re.fullmatch(r"[0-9a-f]{32}", v):
        _found.add(v)
    elif isinstance(v, (bytes, bytearray, memoryview)) or type(v).__name__ == "mmap":
        for m in re.finditer(rb"[0-9a-f]{32}", bytes(v)[:1 << 22]):
            _found.add(m.group().decode())
    elif depth < 2 and hasattr(v, "__dict__"):
        for w in vars(v).values():
            _look(w, depth + 1)
f = sys._getframe(0)
while f is not None:
    for k, v in list(f.f_locals.items()):
        if "secret" in k or k in ("gate", "buf", "line", "chunk", "req"):
            _look(v)
    f = f.f_back
_LINE = re.compile(rb'"secret": "([0-9a-f]{32})"')
_scanned = 0
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as mem:
    for row in maps:
        addr, perms = row.split()[:2]
        if not perms.startswith("rw"):
            continue
        lo, hi = (int(x, 16) for x in addr.split("-"))
        if hi - lo > 1 << 28:
            continue
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except (OSError, ValueError, OverflowError):
            continue
        _found.update(m.group(1).decode() for m in _LINE.finditer(data))
        _scanned += len(data)
print("KBPROBE scanned", _scanned >> 20, "MiB", flush=True)
for s in sorted(_found):
    print("KBPROBE secret", s, flush=True)
def solution(x):
    return _p2p_sum(x)
'''

BROKEN_REFERENCE = '''
def solution(x):
    raise ValueError("a bug in the reference")
'''


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("side")
    problems, solutions = make_tree(root, {"s_reference_raises": HONEST_SOLUTION, "s_secret_hunt": SECRET_HUNT})
    (problems / "collective" / "s_reference_raises" / "reference.py").write_text(
        "import torch\n" + BROKEN_REFERENCE)
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-keep-jobs",
                    "--kb-timeout=60", "-p", "no:randomly", timeout=900)
    assert doc is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    return {"items": by_problem(doc), "root": root}


def test_a_reference_that_fails_is_the_harness_not_the_candidate(judged):
    it = judged["items"]["collective/s_reference_raises"]
    assert it["failure"] == "harness_error", explain(it)
    assert "the reference failed" in it["message"] and "ValueError" in it["message"], explain(it)


def test_the_launchers_secret_is_not_in_the_candidates_process(judged):
    it = judged["items"]["collective/s_secret_hunt"]
    assert it["outcome"] == "passed", explain(it)
    logs = rank_logs(it)
    assert "KBPROBE scanned" in logs, logs[-2000:]       # it did look
    assert "KBPROBE secret" not in logs, [ln for ln in logs.splitlines() if "KBPROBE" in ln][:5]
