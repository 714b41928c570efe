"""Red team on CPU: one candidate per known cheat, all judged by ONE run of the real plugin
(torchrun + gloo, 2 ranks, forbid enforced as on CUDA), each required to end with its own
failure category. Every candidate is a copy of the all_reduce problem; most compute the right
answer with point-to-point calls (allowed there) so that they fail only for their cheat.
"""
from __future__ import annotations

import time

import pytest
from cheatlib import HONEST, rank_logs, tree_digest
from kbrun import by_problem, explain, leftover_processes, make_tree, run

pytestmark = pytest.mark.e2e      # every test here runs an inner pytest or ranks (tests/e2e_guard.py)

TIMEOUT_S = 40
THREAD_WORK_S = 0.004

CHEATS = {
    # ---- control: an honest candidate passes under the same options -------------------------
    "honest_p2p": HONEST + """
def solution(x):
    return _p2p_sum(x)
""",
    # ---- forbidden collectives, reached in every way we know -----------------------------------
    "fc_direct": HONEST + """
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
""",
    "fc_getattr": HONEST + """
def solution(x):
    out = x.clone()
    getattr(dist, "all_" + "reduce")(out)
    return out
""",
    "fc_unwrapped": HONEST + """
import inspect
def _original(f):
    f = inspect.unwrap(f)
    for cell in getattr(f, "__closure__", None) or ():      # a counting wrapper's captured original
        v = cell.cell_contents
        if callable(v) and getattr(v, "__name__", "") == "all_reduce":
            return v
    return f
_ar = _original(torch.distributed.distributed_c10d.all_reduce)
def solution(x):
    out = x.clone()
    _ar(out)
    return out
""",
    "fc_funcol": HONEST + """
import torch.distributed._functional_collectives as funcol
def solution(x):
    return funcol.wait_tensor(funcol.all_reduce(x, "sum", dist.group.WORLD))
""",
    "fc_torch_ops": HONEST + """
def solution(x):
    y = torch.ops._c10d_functional.all_reduce(x, "sum", dist.group.WORLD.group_name)
    return torch.ops._c10d_functional.wait_tensor(y)
""",
    "fc_process_group": HONEST + """
def solution(x):
    out = x.clone()
    dist.group.WORLD.allreduce([out]).wait()
    return out
""",
    "fc_backend": HONEST + """
def solution(x):
    out = x.clone()
    dist.group.WORLD._get_backend(x.device).allreduce([out]).wait()
    return out
""",
    # honest while a dispatch mode watches; the ProcessGroup collective only in unwatched (timed) calls
    "fc_when_unwatched": HONEST + """
def solution(x):
    if torch._C._len_torch_dispatch_stack() > 0:
        return _p2p_sum(x)
    out = x.clone()
    dist.group.WORLD.allreduce([out]).wait()
    return out
""",
    # ---- the hidden harness / reference ----------------------------------------------------------
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
    # ---- caches: a stale answer once the inputs change under the same key ----------------------
    "cache_data_ptr": HONEST + """
_c = {}
def solution(x):
    k = x.data_ptr()
    if k not in _c:
        _c[k] = _p2p_sum(x)
    return _c[k].clone()
""",
    "cache_id": HONEST + """
_c = {}
def solution(x):
    k = id(x)
    if k not in _c:
        _c[k] = _p2p_sum(x)
    return _c[k].clone()
""",
    "cache_shape": HONEST + """
_c = {}
def solution(x):
    k = tuple(x.shape)
    if k not in _c:
        _c[k] = _p2p_sum(x)
    return _c[k].clone()
""",
    "cache_few_values": HONEST + """
_c = {}
def solution(x):
    k = tuple(x[:8].tolist()) + tuple(x[-8:].tolist())
    if k not in _c:
        _c[k] = _p2p_sum(x)
    return _c[k].clone()
""",
    "cache_full_hash": HONEST + """
import hashlib
_c = {}
def solution(x):
    k = hashlib.sha1(x.view(torch.int16).numpy().tobytes()).hexdigest()
    if k not in _c:
        _c[k] = _p2p_sum(x)
    return _c[k].clone()
""",
    # ---- work the timer would not wait for -----------------------------------------------------
    "thread_pool_worker": HONEST + """
import queue, threading
_jobs = queue.Queue()
def _worker():
    while True:
        x, out, done = _jobs.get()
        out.copy_(_p2p_sum(x))
        done.set()
_t = None
def solution(x):
    global _t
    if _t is None:
        _t = threading.Thread(target=_worker, name="kb-cheat-worker", daemon=True)
        _t.start()
    out, done = torch.empty_like(x), threading.Event()
    _jobs.put((x, out, done))
    return out              # filled later by the worker thread
""",
    "thread_per_call": HONEST + f"""
import threading, time
def _work(x, out):
    time.sleep({THREAD_WORK_S})          # slow work, off the calling thread
    out.copy_(_p2p_sum(x))
def solution(x):
    out = torch.empty_like(x)
    threading.Thread(target=_work, args=(x, out), daemon=True).start()
    return out              # returns at once; the harness waits for the thread, so the time includes it
""",
    # ---- patching the clock or the comparison --------------------------------------------------
    "patch_timer_import": HONEST + """
import time
_real = time.perf_counter
time.perf_counter = lambda: _real() * 0.001      # a slow clock for everyone, patched at import
def solution(x):
    return _p2p_sum(x)
""",
    "patch_timer_call": HONEST + """
import time
_real = time.perf_counter
def solution(x):
    time.perf_counter = lambda: _real() * 0.001
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.Event.elapsed_time = lambda self, end: 1e-6
    return _p2p_sum(x)
""",
    "patch_compare": HONEST + """
import torch.testing
def solution(x):
    torch.allclose = lambda *a, **k: True
    torch.equal = lambda *a, **k: True
    torch.testing.assert_close = lambda *a, **k: None
    torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
    return torch.zeros_like(x)
""",
    "patch_tensor_any": HONEST + """
def solution(x):
    torch.Tensor.any = lambda self, *a, **k: torch.tensor(False)
    return torch.zeros_like(x)
""",
    "patch_harness_module": HONEST + """
import sys
def solution(x):
    for name, mod in list(sys.modules.items()):
        if name.endswith(("worker.compare", "rank.compare")):
            mod.structure = lambda *a, **k: None
            mod.values = lambda *a, **k: (None, 0.0)
            mod.unchanged = lambda *a, **k: None
            mod.aliasing = lambda *a, **k: None
            mod.distinct = lambda *a, **k: None
    return torch.zeros_like(x)
""",
    "patch_code_object": HONEST + """
import sys
def _ok(*a, **k):
    return None, 0.0
def solution(x):
    for name, mod in list(sys.modules.items()):
        if name.endswith(("worker.compare", "rank.compare")):
            mod.values.__code__ = _ok.__code__        # same function object, new body
    return torch.zeros_like(x)
""",
    "global_dispatch_mode": HONEST + """
from torch.utils._python_dispatch import TorchDispatchMode
class _Agree(TorchDispatchMode):          # left active: every later op (the check's too) runs through it
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith("aten.any"):
            return torch.tensor(False)
        if name.startswith("aten.equal"):
            return True
        return func(*args, **(kwargs or {}))
_mode = None
def solution(x):
    global _mode
    if _mode is None:
        _mode = _Agree()
        _mode.__enter__()
    return torch.zeros_like(x)
""",
    # ---- not a real, fresh, computed tensor --------------------------------------------------
    "lazy_subclass": HONEST + """
class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, src):
        return torch.Tensor._make_subclass(cls, torch.empty_like(src))
    def __init__(self, src):
        self.src = src
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})
def solution(x):
    return Lazy(x)
""",
    "view_of_input": HONEST + """
def solution(x):
    x.copy_(_p2p_sum(x))           # save an allocation: the answer in the input's memory
    return x.view(-1)
""",
    "uninitialised_buffer": HONEST + """
import gc
def solution(x):
    gc.collect()
    return torch.empty(x.shape, dtype=x.dtype)     # whatever the allocator hands back
""",
    "frame_expected": HONEST + """
import inspect
def solution(x):
    f = inspect.currentframe().f_back
    while f is not None:                           # the harness's own frames: is the answer lying there?
        loc = f.f_locals
        e = loc.get("expected")
        if isinstance(e, torch.Tensor) and e.shape == x.shape:
            return e.clone()
        if "exps" in loc and "sets" in loc and loc["exps"]:
            for s, e in zip(loc["sets"], loc["exps"]):
                if s[0] is x:
                    return e.clone()
        f = f.f_back
    return torch.zeros_like(x)
""",
    # ---- trivialising the check ------------------------------------------------------------------
    "zero_inputs": HONEST + """
def solution(x):
    x.zero_()
    return torch.zeros_like(x)
""",
    "same_data": HONEST + """
def solution(x):
    return x * dist.get_world_size()       # as if every rank held the same data
""",
    "fp8_roundtrip": HONEST + """
def solution(x):
    small = x.to(torch.float8_e4m3fn).to(x.dtype)      # half the bytes on the wire
    return _p2p_sum(small)
""",
    # ---- ending early / claiming a pass ------------------------------------------------------------
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

# a second small size, so that a candidate written for one shape meets another
HARDCODED = {
    "hardcoded_shape": HONEST + """
N = 4096                     # the size seen while developing
def solution(x):
    return _p2p_sum(x[:N].contiguous())
""",
}
SIZES_PATCH = {"sizes": {"tiny": {"n": 4096}, "tiny2": {"n": 8192}, "small": {"n": 524288}}}


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("cheats")
    problems, solutions = make_tree(root, CHEATS)
    make_tree(root, HARDCODED, yaml_patch=SIZES_PATCH)
    before = tree_digest(problems)
    t0 = time.monotonic()
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "-n", "2",
                    "--kb-keep-jobs", "--kb-sizes=tiny,tiny2",
                    f"--kb-timeout={TIMEOUT_S}", "--kb-pg-timeout=10", timeout=900)
    assert doc is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    return {"proc": proc, "doc": doc, "items": by_problem(doc), "root": root, "problems": problems,
            "before": before, "wall": time.monotonic() - t0}


def item(judged, name):
    return judged["items"][f"collective/{name}"]


def failed(judged, name, category, *words):
    it = item(judged, name)
    assert it["outcome"] == "failed", f"{name} was not caught: {it['outcome']} {it.get('message')}"
    assert it["failure"] == category, f"{name}: expected {category}, got {it['failure']}: {it['message']}"
    for w in words:
        assert w in it["message"], f"{name}: {w!r} not in {it['message']!r}"
    return it


def test_honest_control_passes(judged):
    it = item(judged, "honest_p2p")
    assert it["outcome"] == "passed", it["message"]
    assert not it["warnings"]


def test_every_item_reported_and_nothing_left(judged):
    assert set(judged["items"]) == {f"collective/{n}" for n in {**CHEATS, **HARDCODED}}
    assert not leftover_processes(str(judged["root"]))


def test_problem_tree_unchanged(judged):
    assert tree_digest(judged["problems"]) == judged["before"]


# ---- forbidden collectives ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fc_direct", "fc_getattr", "fc_unwrapped", "fc_process_group", "fc_backend"])
def test_collective_called_any_way_is_forbidden(judged, name):
    failed(judged, name, "forbidden_call", "collectives")


@pytest.mark.parametrize("name", ["fc_funcol", "fc_torch_ops"])
def test_functional_collectives_are_forbidden(judged, name):
    failed(judged, name, "forbidden_call", "_c10d_functional")


def test_collective_only_in_unwatched_timed_calls_is_forbidden(judged):
    """Every call is watched alike now (no dispatch mode marks the checked ones), so the collective
    it kept for "unwatched" calls is counted in its first non-setup call."""
    failed(judged, "fc_when_unwatched", "forbidden_call", "ProcessGroup.allreduce")


# ---- hidden files ------------------------------------------------------------------------------
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


# ---- caches ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cache_data_ptr", "cache_id", "cache_shape", "cache_few_values", "cache_full_hash"])
def test_cached_results_are_a_mismatch(judged, name):
    failed(judged, name, "mismatch")


# ---- threads -----------------------------------------------------------------------------------
def test_worker_thread_left_running_fails(judged):
    failed(judged, "thread_pool_worker", "runtime_error", "thread")


def test_output_finished_after_return_fails(judged):
    # a thread still running when solution() returns (finishing the output in the background) fails
    failed(judged, "thread_per_call", "runtime_error", "threads it started were still running")


# ---- tampering ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["patch_timer_import", "patch_timer_call"])
def test_patching_the_clock_is_harmless(judged, name):
    """The clock is the checker's, in another process: a candidate that patches its own times
    nothing but itself, and is judged on what it computes (these compute the right answer)."""
    it = item(judged, name)
    assert it["outcome"] == "passed", explain(it)


@pytest.mark.parametrize("name", ["patch_compare", "patch_tensor_any", "patch_harness_module", "patch_code_object"])
def test_patching_the_check_is_harmless(judged, name):
    """The comparison runs in the checker: patched comparison functions in the candidate's process
    change nothing, and its garbage output is a mismatch."""
    # patching a function's code object is also refused outright by the candidate's shield
    failed(judged, name, "forbidden_call" if name == "patch_code_object" else "mismatch")


def test_a_dispatch_mode_left_active_breaks_the_global_state_rule(judged):
    failed(judged, "global_dispatch_mode", "forbidden_call", "global torch state", "dispatch modes left active")


# ---- fake outputs ------------------------------------------------------------------------------
def test_lazy_tensor_subclass_fails(judged):
    failed(judged, "lazy_subclass", "mismatch", "not a torch.Tensor")


def test_view_of_the_input_fails(judged):
    it = failed(judged, "view_of_input", "mismatch")
    assert "modified" in it["message"] or "shares memory" in it["message"]


@pytest.mark.parametrize("name", ["uninitialised_buffer", "frame_expected", "zero_inputs", "same_data", "fp8_roundtrip"])
def test_wrong_values_are_a_mismatch(judged, name):
    failed(judged, name, "mismatch")


def test_hardcoded_shape_fails_on_the_other_size(judged):
    it = failed(judged, "hardcoded_shape", "mismatch", "size tiny2", "shape")
    assert it["sizes"][0]["name"] == "tiny" and all(t["ok"] for t in it["sizes"][0]["trials"])


# ---- exiting early / faking a pass -------------------------------------------------------------
@pytest.mark.parametrize("name", ["exit0_rank1", "fake_result", "fake_result_shell"])
def test_early_exit_or_fake_result_never_passes(judged, name):
    it = item(judged, name)
    assert it["outcome"] == "failed", explain(it)
    assert it["failure"] in ("crash", "runtime_error", "forbidden_call"), it["message"]
    assert "score" not in it or it["score"] is None
