"""The solver processes' host allocator (rank/hostmem.py): with glibc's defaults a window of held
host outputs is trimmed back to the system when freed, so every window pays its first-touch page
faults again (per process, and by luck with huge pages or without: the same reference read 0.78x
against itself on an H100); with the fixed thresholds, memory once touched is reused."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from kbrun import by_problem, make_tree, run

pytestmark = pytest.mark.e2e

WINDOWS = textwrap.dedent("""
    import ctypes, resource, sys
    from pytest_kernelbench.rank import hostmem
    steady = hostmem.steady()
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    faults = []
    for window in range(5):          # ten held outputs of 2 MiB, written, then freed together
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        held = [libc.malloc(2 << 20) for _ in range(10)]
        for p in held:
            ctypes.memset(p, 1, 2 << 20)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        for p in held:
            libc.free(p)
    print(steady, max(faults[1:]))
""")


def _windows(**env: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", WINDOWS], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}).stdout.split()
    return out[0], int(out[1])


def test_fixed_thresholds_stop_each_window_paying_its_page_faults_again():
    steady, faults = _windows(KB_DEV_MALLOC_DEFAULT="1")
    assert steady == "False" and faults > 2000          # 10 x 512 pages, every window
    steady, faults = _windows(KB_DEV_MALLOC_DEFAULT="0")
    assert steady == "True" and faults < 50


PROBE = '''
import ctypes, resource
import torch.distributed as dist

_libc = ctypes.CDLL(None)
_libc.malloc.restype, _libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]

def _window():
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    held = [_libc.malloc(2 << 20) for _ in range(48)]    # past any threshold glibc raises to by itself
    for p in held:
        ctypes.memset(p, 1, 2 << 20)
    for p in held:
        _libc.free(p)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0

def solution(x):
    _window()
    again = _window()
    if again > 2000:
        raise RuntimeError(f"host memory trimmed between windows: {again} page faults")
    y = x.clone()
    dist.all_reduce(y)
    return y
'''


def _judge(root, **env: str) -> dict:
    problems, solutions = make_tree(root, {"host_windows": PROBE}, yaml_patch={"forbid": []})
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-sizes=tiny",
                    "--kb-timing=off", timeout=300, env=env)
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return by_problem(doc)["collective/host_windows"]


def test_the_candidate_process_runs_with_the_fixed_thresholds(tmp_path):
    it = _judge(tmp_path / "fixed")
    assert it["outcome"] == "passed", (it["failure"], it["message"])
    it = _judge(tmp_path / "default", KB_DEV_MALLOC_DEFAULT="1")       # the probe itself can fail
    assert it["outcome"] == "failed" and "page faults" in it["message"], (it["outcome"], it["message"])
