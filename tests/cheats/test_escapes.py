"""Red team of the trust boundary (issue 21): one cheat (at least) per class of escape that passed
when the rank process held the verdict, the secrets, the harness and the reference beside the
candidate. Each is judged by ONE run of the real plugin (CPU, gloo, W=2) and must end with the
category named in its test. Run against the code before the split, every cheat here passed (or,
for the file and report classes, got what it came for): see the issue for that run.

The cheats look for what the old rank process held (frames, gc, sys.modules, /proc) and fall back
to garbage when they find nothing, so "caught" is the verdict the checker reaches on its own.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from cheatlib import HONEST, rank_logs, tree_digest
from kbrun import by_problem, explain, leftover_processes, make_tree, run

pytestmark = pytest.mark.e2e      # every test here runs an inner pytest or ranks (tests/e2e_guard.py)

# what the cheats do when the harness is out of their reach: a wrong answer, so that only a cheat
# that worked can pass
GARBAGE = "torch.zeros_like(x)"

# frame walking: every (name, object) in the caller's frames (the old rank: Rank.call_candidate's
# `self`); sys._getframe(0).f_back raises no audit event
FRAMES = '''
import sys
def _callers():
    f = sys._getframe(0).f_back
    while f is not None:
        for k, v in list(f.f_locals.items()):
            yield k, v
        f = f.f_back
def _find(attr):
    for _, v in _callers():
        if hasattr(v, attr):
            return v
'''

CHEATS = {
    "honest": HONEST + "\ndef solution(x):\n    return _p2p_sum(x)\n",
    # ---- 1. harness state reached from the candidate's own process ---------------------------------
    # the verdict functions shadowed on the rank object
    "c1_shadow_verdict": HONEST + FRAMES + f'''
def solution(x):
    rank = _find("fail_if_any")
    if rank is not None:
        rank.check = lambda *a, **k: (None, None, 0.0)
        rank.fail_if_any = lambda *a, **k: None
    return {GARBAGE}
''',
    # the job's signing key, read from memory: a forged "passed" result, signed, and out
    "c1_forge_result": HONEST + FRAMES + f'''
import hashlib, hmac, json, os
def _write(dfd, rel, text):       # relative to a directory descriptor: no absolute path to refuse
    fd = os.open(rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=dfd)
    os.write(fd, text)
    os.close(fd)
def solution(x):
    rank = _find("files")
    files = getattr(rank, "files", None)
    if files is not None and getattr(files, "key", None):
        key, token, r = files.key, files.token, rank.rank
        body = json.dumps({{"status": "passed", "failure": None, "world_size": rank.world, "device": "cpu",
                           "sizes": [], "phases_s": {{}}, "warnings": []}}).encode() if r == 0 else b""
        digest = hashlib.sha256(body).hexdigest()
        mark = hmac.new(key.encode(), f"{{token}}|done|{{r}}|{{digest}}".encode(), hashlib.sha256).hexdigest()
        dfd = os.open(os.path.dirname(os.getcwd()), os.O_RDONLY)     # the job folder (cwd is its cwd/)
        if r == 0:
            _write(dfd, "result.json", body)
        _write(dfd, f"done/rank{{r}}", mark.encode())
        sys.stdout.flush()
        os._exit(0)
    return {GARBAGE}
''',
    # ---- 2. forbid layers told "this is the harness" -------------------------------------------------
    "c2_harness_marker": HONEST + '''
import importlib
def solution(x):
    out = x.clone()
    for name in ("pytest_kernelbench.rank.guards", "pytest_kernelbench.worker.guards"):
        try:
            guards = importlib.import_module(name)
            with guards.harness_call():          # counted as the harness's own collective
                dist.all_reduce(out)
            return out
        except (ImportError, AttributeError):
            pass
    dist.all_reduce(out)
    return out
''',
    # a child process (started at import, so alive through every call) does the forbidden reduction
    "c2_child_does_it": HONEST + '''
import os, subprocess, sys
_child = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)"])
def solution(x):
    return _p2p_sum(x)
''',
    # the same child with its main thread gone (pthread_exit) and a thread of it running on: /proc
    # shows its main thread, and so the process, as a zombie; a liveness test that read only that
    # missed it during the calls and after the job
    "c2_headless_child": HONEST + """
import subprocess, sys, time
_CHILD = ("import ctypes, threading, time\\n"
          "threading.Thread(target=lambda: [time.sleep(0.05) for _ in iter(int, 1)]).start()\\n"
          "time.sleep(0.2)\\nctypes.CDLL(None).pthread_exit(None)\\n")
_child = subprocess.Popen([sys.executable, "-c", _CHILD])
time.sleep(1.0)         # its main thread is gone before the first call
def solution(x):
    return _p2p_sum(x)
""",
    # ---- 3. the reference's path rewritten: the wrapper's captured all_reduce becomes a no-op ----------
    "c3_noop_reference": HONEST + '''
def _noop(*a, **k):
    return None
for _name in ("all_reduce",):
    _f = getattr(dist, _name)
    for _cell in getattr(_f, "__closure__", None) or ():
        if callable(_cell.cell_contents) and getattr(_cell.cell_contents, "__name__", "") == _name:
            _cell.cell_contents = _noop           # the reference's all_reduce now does nothing
def solution(x):
    return x.clone()                              # what the broken reference returns
''',
    # ---- 4. timed calls unchecked: honest only where it believes it is checked -------------------------
    "c4_garbage_when_timed": HONEST + FRAMES + f'''
import os
def _timed():
    if torch._C._len_torch_dispatch_stack() > 0:        # the old checked calls ran under a mode
        return False
    for k, v in _callers():
        if k == "first" and v is True:                  # a setup call: checked
            return False
        calls = getattr(v, "calls", None)               # the new runtime's batch: a window of many calls
        if isinstance(calls, list):
            return len(calls) > 1
    return True
def solution(x):
    if _timed():
        return {GARBAGE}
    return _p2p_sum(x)
''',
    # ---- 6. native code: a file function by another name -----------------------------------------------
    # (a native problem, below: NATIVE_FOPEN)
    # ---- 7. the report: a forged "passed" line and a torn one that swallows the real record ---------------
    "c7_forge_jsonl": HONEST + f'''
import glob, json, os
def _forge():
    here = os.path.abspath(os.getcwd())
    while here != "/":
        for path in glob.glob(os.path.join(here, "*.jsonl")):
            with open(path) as f:
                first = json.loads(f.readline() or "{{}}")
            fake = dict(first, problem="collective/c7_forge_jsonl", outcome="passed", failure=None, message="")
            fake["nodeid"] = first.get("nodeid", "").replace(first.get("problem", "?"), "collective/c7_forge_jsonl")
            with open(path, "a") as f:
                f.write(json.dumps(fake) + "\\n" + '{{"torn": ')   # the real record lands after this
            return path
        here = os.path.dirname(here)
_done = []
def solution(x):
    if not _done:
        _done.append(1)
        try:
            path = _forge()
            print("KBPROBE forged" if path else "KBPROBE found no report", path)
        except OSError as e:
            print("KBPROBE refused", e)
    return {GARBAGE}
''',
    # ---- 9. the multicast switch rewritten in place, and restored before returning -----------------------
    "c9_getenv_rewrite": HONEST + '''
import ctypes, time
_libc = ctypes.CDLL(None)
_libc.getenv.restype = ctypes.c_void_p
_SWITCH = b"NCCL_" + b"NV" + b"LS_ENABLE"     # spelled at run time: no text scan sees it
def solution(x):
    p = _libc.getenv(_SWITCH)
    if p:
        ctypes.memmove(p, b"1", 1)         # the switch on while a communicator would be made
        time.sleep(0.3)
        ctypes.memmove(p, b"0", 1)         # and back before anyone looks at the end of the call
    return _p2p_sum(x)
''',
}

# 5. a thread invisible to `threading` that holds the GIL whenever the candidate is not running
GIL_HOG = HONEST + '''
import _thread, sys, time
_busy = [False]
def _hog():
    while True:
        if not _busy[0]:
            t = time.perf_counter()
            while time.perf_counter() - t < 0.05:       # spin in Python: the GIL is ours for 50 ms
                pass
        time.sleep(0)
sys.setswitchinterval(0.05)
_thread.start_new_thread(_hog, ())
def solution(x):
    _busy[0] = True
    try:
        return _p2p_sum(x)
    finally:
        _busy[0] = False
'''

# 8. across items: the first item rewrites the second's hidden harness so its garbage passes
ATTACKER = HONEST + '''
import os
def _attack():
    here = os.path.abspath(os.getcwd())
    while here != "/":
        rel = os.path.join("problems", "collective", "c8_victim", "harness.py")
        if os.path.exists(os.path.join(here, "problems")):
            dfd = os.open(here, os.O_RDONLY)          # then a relative path: no absolute path to refuse
            fd = os.open(rel, os.O_WRONLY | os.O_APPEND, dir_fd=dfd)
            os.write(fd, b"\\n_inputs = inputs\\ndef inputs(*a, **k):\\n    (x,) = _inputs(*a, **k)\\n    return (x * 0,)\\n")
            os.close(fd)
            return rel
        here = os.path.dirname(here)
_done = []
def solution(x):
    if not _done:
        _done.append(1)
        try:
            path = _attack()
            print("KBPROBE rewrote" if path else "KBPROBE found no harness", path)
        except OSError as e:
            print("KBPROBE refused", e)
    return _p2p_sum(x)
'''
VICTIM = f"import torch\n\ndef solution(x):\n    return {GARBAGE}\n"

# 10. the reference runs in a process of its own beside the candidate's (the same user): renice it,
# make it an idle-class process and move it onto one CPU, so the reference's windows run slower
SLOW_REFERENCE = HONEST + '''
import os
def _siblings():
    me, parent = os.getpid(), os.getppid()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                        found.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return found
_done = []
def solution(x):
    if not _done:
        _done.append(1)
        for pid in _siblings():
            for tid in os.listdir(f"/proc/{pid}/task"):
                for act in (lambda t: os.setpriority(os.PRIO_PROCESS, t, 19),
                            lambda t: os.sched_setscheduler(t, os.SCHED_IDLE, os.sched_param(0)),
                            lambda t: os.sched_setaffinity(t, {min(os.sched_getaffinity(0))})):
                    try:
                        act(int(tid))
                        print("KBPROBE changed", pid, tid)
                    except OSError as e:
                        print("KBPROBE refused", pid, tid, e)
    return _p2p_sum(x)
'''

# 6. native: a region that opens a file through fopen64 (the source scan refused fopen by name only)
NATIVE_FOPEN = """
  // >>> EDIT reduce
  FILE* f = fopen64("/etc/hostname", "r");
  if (f) fclose(f);
  memcpy(y, slots, n * sizeof(float));
  for (int q = 1; q < world; ++q)
    for (int64_t i = 0; i < n; ++i) y[i] += slots[q * stride + i];
  // <<< EDIT reduce
"""


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("escapes")
    problems, solutions = make_tree(root, {**CHEATS, "c5_gil_hog": GIL_HOG, "c8_attacker": ATTACKER, "c8_victim": VICTIM,
                                           "c10_slow_reference": SLOW_REFERENCE})
    make_tree(root, {"c6_fopen64": NATIVE_FOPEN}, base="collective/shm_segment_sum")
    (solutions / "collective" / "c6_fopen64.py").rename(solutions / "collective" / "c6_fopen64.cpp")
    before = tree_digest(problems)
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-keep-jobs",
                    "--kb-timeout=60", "-p", "no:randomly", timeout=1200)
    assert doc is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    return {"proc": proc, "doc": doc, "items": by_problem(doc), "root": root, "problems": problems, "before": before}


def caught(judged, name, category, *words):
    it = judged["items"][f"collective/{name}"]
    assert (it["outcome"], it["failure"]) == ("failed", category), f"{name}: {explain(it)}"
    for w in words:
        assert w in it["message"], f"{name}: {w!r} not in: {explain(it)}"
    return it


def test_the_honest_control_passes_beside_the_cheats(judged):
    it = judged["items"]["collective/honest"]
    assert it["outcome"] == "passed", explain(it)
    assert "landlock" in " ".join(it.get("isolation") or []), it.get("isolation")
    # the job ended at its done marks and its own processes were killed then: none is a stray
    assert not it.get("killed_strays"), it.get("killed_strays")


# ---- 1 -------------------------------------------------------------------------------------------------
def test_1_the_verdict_is_not_in_the_candidates_process(judged):
    caught(judged, "c1_shadow_verdict", "mismatch")


def test_1_the_signing_key_is_not_in_the_candidates_process(judged):
    caught(judged, "c1_forge_result", "mismatch")


# ---- 2 -------------------------------------------------------------------------------------------------
def test_2_there_is_no_harness_marker_to_hide_behind(judged):
    caught(judged, "c2_harness_marker", "forbidden_call", "all_reduce")


def test_2_a_child_alive_during_a_call_fails_the_item(judged):
    caught(judged, "c2_child_does_it", "forbidden_call", "still alive after the call")


def test_2_a_child_whose_main_thread_exited_is_still_alive(judged):
    caught(judged, "c2_headless_child", "forbidden_call", "still alive after the call")
    # and it is gone after the job: test_nothing_is_left_running looks at every thread too


# ---- 3 -------------------------------------------------------------------------------------------------
def test_3_the_reference_runs_where_the_candidate_cannot_rewrite_it(judged):
    caught(judged, "c3_noop_reference", "mismatch")


# ---- 4 -------------------------------------------------------------------------------------------------
def test_4_timed_calls_are_checked(judged):
    caught(judged, "c4_garbage_when_timed", "mismatch")


# ---- 5 -------------------------------------------------------------------------------------------------
def test_5_an_invisible_thread_cannot_slow_the_reference(judged):
    """The hog ran in the old rank while the reference did: the reference read 3-10x slower with a
    hog that let go every 2 ms (a gloo all_reduce loop beside it in one process: 65x); this one
    holds the GIL 50 ms at a time, which a call of about 1 ms beside it would wait out. Now the
    candidate process is stopped (SIGSTOP) during every reference window, so the reference takes
    what the same reference takes beside the honest control of the same run. CPU times are no
    speed: on a loaded 2-core machine the median reference of the two items read within 0.6-3.8x
    of each other (CI, three xdist workers)."""
    it = judged["items"]["collective/c5_gil_hog"]
    assert it["outcome"] == "passed", explain(it)
    ref = it["sizes"][0]["timing"]["reference"]["median_s"]
    control = judged["items"]["collective/honest"]["sizes"][0]["timing"]["reference"]["median_s"]
    assert ref < 8.0 * control, (ref, control)


# ---- 6 -------------------------------------------------------------------------------------------------
def test_6_native_code_may_link_only_what_the_recipe_allows(judged):
    caught(judged, "c6_fopen64", "forbidden_construct", "fopen64")


def test_6_a_python_candidate_cannot_read_the_hidden_files_however_it_opens_them(judged):
    """Relative opens through a directory descriptor went past the old path-string shield; the
    kernel (Landlock) refuses them now, whatever path spelling is used."""
    for name in ("c1_shadow_verdict", "c8_attacker"):
        logs = rank_logs(judged["items"][f"collective/{name}"])
        assert "def inputs" not in logs


# ---- 7 -------------------------------------------------------------------------------------------------
def test_7_a_candidate_cannot_write_the_report(judged):
    it = caught(judged, "c7_forge_jsonl", "mismatch")
    assert "KBPROBE forged" not in rank_logs(it), rank_logs(it)[-1500:]
    lines = (Path(judged["root"]) / "report.jsonl").read_text().splitlines()
    mine = [json.loads(ln) for ln in lines if "c7_forge_jsonl" in ln]
    assert [r["outcome"] for r in mine] == ["failed"], mine


# ---- 8 -------------------------------------------------------------------------------------------------
def test_8_an_item_cannot_change_another_items_harness(judged):
    caught(judged, "c8_victim", "mismatch")
    assert tree_digest(judged["problems"]) == judged["before"]
    assert "KBPROBE rewrote" not in rank_logs(judged["items"]["collective/c8_attacker"])


# ---- 9 -------------------------------------------------------------------------------------------------
def test_9_a_multicast_switch_flipped_and_restored_inside_a_call_is_seen(judged):
    # the guarded strings are sealed before the candidate runs (rank/sealenv.py): the write faults;
    # where they could not be made read-only the watcher sees the flip
    it = judged["items"]["collective/c9_getenv_rewrite"]
    if it["failure"] == "crash":
        caught(judged, "c9_getenv_rewrite", "crash", "SIGSEGV")
    else:
        caught(judged, "c9_getenv_rewrite", "unsafe", "NCCL_NVLS_ENABLE")


# ---- 10 ------------------------------------------------------------------------------------------------
def test_10_the_reference_process_cannot_be_reniced_or_moved(judged):
    """A class the split opened: the reference process ran as the candidate's user, so a candidate
    could renice it, make it idle-class or pin it onto a busy CPU (Landlock does not cover
    scheduling). Where the checker is root the two run under different uids (issue 44) and the
    kernel refuses each change; elsewhere the checker compares its scheduling before every
    reference window and fails the item."""
    it = judged["items"]["collective/c10_slow_reference"]
    if "uid" in (it.get("isolation") or []):
        assert it["outcome"] == "passed", explain(it)
        logs = rank_logs(it)
        assert "KBPROBE refused" in logs and "KBPROBE changed" not in logs, logs[-2000:]
    else:
        caught(judged, "c10_slow_reference", "forbidden_call", "scheduling of the reference process")


def test_nothing_is_left_running(judged):
    assert not leftover_processes(str(judged["root"]))
