"""Issue 11 item 9: NVLink multicast never runs on the lent machines.

Layer 1 (pytest process): a candidate whose code (names, string literals, CUDA/PTX sources; not
its comments, issue 23) names multimem / multicast / NVLS is refused before launch. Layer 2 (ranks): an audit hook and stubs refuse changes to the guarded variables,
ctypes lookups of the multicast driver API and of libc's environment writers, cuda-python/CuPy
multicast functions; an integrity check compares the guarded variables with their start values.
The in-rank candidates below build every telltale name by concatenation, so that only layer 2
can catch them. All of them are judged by ONE run of the real plugin (2 CPU ranks)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from cheats.cheatlib import HONEST
from kbrun import by_problem, make_tree, run

from pytest_kernelbench import launch, metrics
from pytest_kernelbench.candidates import safety

# ---- layer 1: the text scan --------------------------------------------------------------------


def test_scan_names_words_and_lines():
    src = "import torch\n\nPTX = 'multimem.ld_reduce.global.add.f32'\nx = h.NvLs_ptr\nx = h.multicast_ptr\n"
    found = safety.scan(src)
    assert found.startswith("uses NVLink multicast"), found
    assert "'multimem' at line 3" in found
    assert "'NvLs_ptr' at line 4" in found
    assert "'multicast_ptr' at line 5" in found


def test_scan_is_case_insensitive_and_finds_driver_names():
    assert "'cuMulticastCreate' at line 1" in safety.scan("f = lib.cuMulticastCreate\n")
    assert "'MULTIMEM_ALL_REDUCE' at line 2" in safety.scan("\nMULTIMEM_ALL_REDUCE = 1\n")
    assert "'NCCL_NVLS_ENABLE' at line 1" in safety.scan("os.environ['NCCL_NVLS_ENABLE'] = '1'")


def test_scan_shows_the_first_few_hits_only():
    found = safety.scan("multicast = 1\n" * 10)
    assert "at line 1" in found and "at line 4" in found and "at line 5" not in found
    assert "and 6 more" in found


def test_scan_clean_text_is_none():
    assert safety.scan("import torch\ndef solution(x):\n    return x.clone()  # multi-cast? no\n") is None
    assert safety.scan("") is None


# Issue 23 item 1: what the code would do is judged, not what its comments say.
RING_WITH_COMMENTS = '''"""A ring all-reduce. NVLink multicast (NVLS, multimem) is not available here."""
import torch
import torch.distributed as dist

# NVLink multicast is not available, so use a ring of send/recv
KERNEL = r"""
// no multimem.ld_reduce here: plain peer loads only
/* multicast would need cuMulticastCreate */
__global__ void add(float* a, const float* b, int n) { int i = threadIdx.x; if (i < n) a[i] += b[i]; }
"""


def solution(x):
    """Sum over ranks; no NVLS."""
    return x.clone()
'''


def test_scan_ignores_comments_docstrings_and_comments_inside_cuda_strings():
    assert safety.scan(RING_WITH_COMMENTS) is None
    assert safety.scan("// multimem would be faster\n/* cuMulticastCreate\n */ int x = 1;\n", "c") is None


def test_scan_still_refuses_real_uses():
    asm = 'K = r"""\n// a comment\nasm volatile("multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];");\n"""\n'
    assert "'multimem' at line 3" in safety.scan(asm)
    assert "'cuMulticastCreate' at line 1" in safety.scan("cuMulticastCreate(&h, &prop);  // make it\n", "c")
    assert "'multimem' at line 2" in safety.scan("/* ok */\nasm(\"multimem.st.global.f32 [%0], %1;\");\n", "c")
    # a line splice ends the comment where the compiler does (`*\\<newline>/` is `*/`)
    assert "'multimem' at line 2" in safety.scan("/* x *\\\n/ asm(\"multimem.st\");\n", "c")
    # escapes in a Python string are resolved before its CUDA comments are stripped
    assert "'multimem' at line 1" in safety.scan('K = "// note\\nasm(\\"multimem.st\\");"\n')
    # a string literal hides no comment marker: the asm after it is code
    assert "'multimem'" in safety.scan('const char* s = "/*"; asm("multimem.st"); // */\n', "c")
    assert "'multimem'" in safety.scan('auto s = R"x( " /* )x"; asm("multimem.st"); /* */\n', "c")
    # a module that reads its own text turns its comments into data
    assert "'multicast' at line 1" in safety.scan("# multicast\nsrc = open(__file__).read()\n")
    assert "'multimem' at line 1" in safety.scan('"""multimem"""\nsrc = __doc__\n')
    # text that does not tokenize (a cut-off answer) is judged as written from where it breaks
    assert "'multimem'" in safety.scan('x = 1\nK = """\n// multimem')


def test_guarded_env_shared_with_the_launcher():
    assert set(safety.GUARDED_ENV) >= {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                       "NVSHMEM_DISABLE_NVLS", "CUDA_VISIBLE_DEVICES"}
    env = launch._env("tok", None, None)
    assert all(env[k] == v for k, v in safety.MULTICAST_OFF.items())
    allowed = launch._env("tok", None, None, allow_multicast=True)
    assert all(allowed.get(k) == os.environ.get(k) for k in safety.MULTICAST_OFF)
    assert "unsafe" in metrics.CATEGORIES


def test_shipped_solutions_pass_the_scan():
    repo = Path(__file__).resolve().parent.parent
    for path in sorted((repo / "problems").rglob("*.py")):
        if path.name != "harness.py":       # hidden, never a candidate
            assert safety.scan(path.read_text()) is None, path
    for path in sorted((repo / "problems").rglob("solution.c*")):     # native fills (.cu, .cpp)
        assert safety.scan(path.read_text(), "c") is None, path


def test_rank_side_rules():
    from pytest_kernelbench.rank.multicast import MulticastGuard, refused_symbol
    for name in ("cuMulticastCreate", "cuMulticastBindMem", "setenv", "putenv", "unsetenv", "clearenv",
                 "cuGetProcAddress_v2", "cudaGetDriverEntryPoint", "dlsym", b"cuMulticastUnbind"):
        assert refused_symbol(name), name
    for name in ("getenv", "cuMemAlloc_v2", "nvmlInit_v2", "cuDeviceGet", 7):
        assert not refused_symbol(name), name
    g = MulticastGuard(names=("NCCL_NVLS_ENABLE", "CUDA_VISIBLE_DEVICES"))
    g.start = {"NCCL_NVLS_ENABLE": "0", "CUDA_VISIBLE_DEVICES": "2,3"}
    assert g._child_env({"NCCL_NVLS_ENABLE": "0", "CUDA_VISIBLE_DEVICES": "3"}) is None   # a subset of GPUs
    assert "NCCL_NVLS_ENABLE='1'" in g._child_env({"NCCL_NVLS_ENABLE": "1", "CUDA_VISIBLE_DEVICES": "2,3"})
    assert "NCCL_NVLS_ENABLE removed" in g._child_env({b"CUDA_VISIBLE_DEVICES": b"2"})
    assert "CUDA_VISIBLE_DEVICES='4'" in g._child_env({"NCCL_NVLS_ENABLE": "0", "CUDA_VISIBLE_DEVICES": "4"})


# ---- layers 1 and 2 through the real plugin ---------------------------------------------------

# the cheat suite's honest p2p sum (cheats/cheatlib.py), plus os and ctypes for the attempts below
REFERENCE = "import os\n" + HONEST + "\n_sum = _p2p_sum\n"
VAR = '("TORCH_SYMM_MEM_DISABLE_" + "MULTI" + "CAST")'      # invisible to the text scan
CANDIDATES = {
    "honest": REFERENCE + '''
def solution(x):
    return _sum(x)
''',
    # issue 23 item 1: a comment is not code (this one failed as unsafe before)
    "comment_multicast": REFERENCE + '''
# NVLink multicast is not available, so use a ring of send/recv
def solution(x):
    return _sum(x)
''',
    "text_multimem": REFERENCE + '''
KERNEL = r"""
__global__ void k(float* mc) { asm volatile("multimem.red.relaxed.sys.global.add.f32 [%0], %1;" :: "l"(mc), "f"(1.0f)); }
"""
def solution(x):
    return _sum(x)
''',
    "env_at_import": REFERENCE + f'''
os.environ[{VAR}] = "0"
def solution(x):
    return _sum(x)
''',
    "env_in_call": REFERENCE + f'''
def solution(x):
    os.environ[{VAR}] = "0"
    return _sum(x)
''',
    "env_in_call_caught": REFERENCE + f'''
def solution(x):
    try:
        del os.environ[{VAR}]
    except Exception:
        pass
    return _sum(x)
''',
    "env_behind_python": REFERENCE + f'''
def solution(x):
    os.environ._data[{VAR}.encode()] = b"0"     # os.environ only; no putenv event
    return _sum(x)
''',
    "dlsym_driver": REFERENCE + '''
import ctypes
def solution(x):
    ctypes.CDLL(None)["cu" + "Multi" + "cast" + "Create"]
    return _sum(x)
''',
    "libc_setenv": REFERENCE + f'''
import ctypes
_libc = ctypes.CDLL(None)
_libc.setenv({VAR}.encode(), b"0", 1)
def solution(x):
    return _sum(x)
''',
    "child_env": REFERENCE + f'''
import subprocess, sys
def solution(x):
    subprocess.run([sys.executable, "-c", "pass"], env={{**os.environ, {VAR}: "0"}})
    return _sum(x)
''',
    "cupy_driver": REFERENCE + '''
import sys, tempfile
_d = tempfile.mkdtemp()
os.makedirs(os.path.join(_d, "cupy_backends", "cuda", "api"))
for _p in ("cupy_backends", "cupy_backends/cuda", "cupy_backends/cuda/api"):
    open(os.path.join(_d, _p, "__init__.py"), "w").close()
with open(os.path.join(_d, "cupy_backends", "cuda", "api", "driver.py"), "w") as _f:
    _f.write("def cu" + "Multi" + "castCreate(*a):\\n    return 0\\ndef cuMemAlloc(n):\\n    return 1\\n")
sys.path.insert(0, _d)
from cupy_backends.cuda.api import driver
assert driver.cuMemAlloc(1) == 1      # the rest of the module still works
def solution(x):
    getattr(driver, "cu" + "Multi" + "castCreate")()
    return _sum(x)
''',
}
UNSAFE_IN_RANK = {  # candidate -> what the message must name
    "env_at_import": "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "env_in_call": "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "env_in_call_caught": "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "env_behind_python": "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "dlsym_driver": "cuMulticastCreate",
    "libc_setenv": "setenv",
    "child_env": "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "cupy_driver": "cupy_backends.cuda.api.driver.cuMulticastCreate",
}


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("safety")
    problems, solutions = make_tree(root, CANDIDATES)
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timing=off",
                    "--kb-sizes=tiny", "--kb-timeout=60", "--kb-pg-timeout=10", timeout=900)
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    items = {p.split("/")[-1]: i for p, i in by_problem(doc).items()}
    return root, items, proc


@pytest.mark.e2e
def test_honest_candidate_passes(judged):
    _, items, proc = judged
    assert items["honest"]["outcome"] == "passed", (items["honest"].get("message"), proc.stdout[-2000:])


@pytest.mark.e2e
def test_comment_about_multicast_passes(judged):
    _, items, proc = judged
    assert items["comment_multicast"]["outcome"] == "passed", (items["comment_multicast"].get("message"),
                                                               proc.stdout[-2000:])


@pytest.mark.e2e
def test_text_mention_is_refused_before_launch(judged):
    root, items, _ = judged
    item = items["text_multimem"]
    assert (item["outcome"], item["failure"]) == ("failed", "unsafe"), item.get("message")
    assert "'multimem' at line" in item["message"]
    assert not item.get("job_dir") and item.get("wall_s") is None      # no torchrun job
    jobs = [p.name for p in root.rglob("jobs/*")]
    assert jobs and not any("text-multimem" in name for name in jobs), jobs


@pytest.mark.parametrize("name", sorted(UNSAFE_IN_RANK))
@pytest.mark.e2e
def test_multicast_attempt_in_rank_is_unsafe(judged, name):
    item = judged[1][name]
    assert (item["outcome"], item["failure"]) == ("failed", "unsafe"), (item.get("failure"), item.get("message"))
    assert UNSAFE_IN_RANK[name] in item["message"], item["message"]
    assert item.get("wall_s") is not None          # it ran: the text scan did not see it
