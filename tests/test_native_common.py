"""The native CUDA problems' fixed helpers have one source (bench/native_common.cu): every copy in
a template or solution equals it (bench/gen_native_common.py writes them), and a drifted copy is
found and put back. Nothing here compiles or needs torch."""
from __future__ import annotations

import subprocess
import sys

import pytest

from bench import gen_native_common as gen  # the repo root is on sys.path (pytest ini `pythonpath`)

SHARED = ("kb_st_release", "kb_ld_acquire", "kb_now_ns", "kb_wait_geq", "kb_last_error", "kb_fail", "KB_CHECK",
          "kb_ipc_alloc", "kb_ipc_open")


def test_the_source_defines_every_shared_helper_once():
    assert sorted(gen.canonical()) == sorted(SHARED)


def test_every_copy_in_the_problems_equals_the_source():
    found = gen.drift()
    assert not found, "".join(found)[:4000] + "\nrun: python bench/gen_native_common.py"
    uses = {n: sum(n in gen.units(f.read_text()) for f in gen.files()) for n in SHARED}
    assert min(uses.values()) >= 30, uses      # shared by most of the CUDA problems, not by one or two


def test_a_drifted_copy_is_found_and_put_back(tmp_path, monkeypatch):
    src = next(f for f in gen.files() if "kb_wait_geq" in gen.units(f.read_text()))
    copy = tmp_path / "problems" / "p2p" / "x" / "template.cu"
    copy.parent.mkdir(parents=True)
    text = src.read_text()
    drifted = text.replace("if (kb_now_ns() - t0 > KB_SPIN_NS) {", "if (false) {", 1)
    assert drifted != text
    copy.write_text(drifted)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    report = gen.drift()
    assert len(report) == 1 and "-    if (false) {" in report[0] and "+    if (kb_now_ns() - t0 > KB_SPIN_NS) {" in report[0]
    assert gen.main([]) == 0 and copy.read_text() == text
    assert gen.drift() == []


def test_a_problem_may_keep_its_own_helper_under_another_name():
    text = ("static int kb_fail_twice(cudaError_t e, const char* what) {\n  return 1;\n}\n"
            "extern \"C\" int kb_init(int device) {\n  return device;\n}\n")
    assert gen.render(text, gen.canonical()) == text      # kb_init is each problem's own


@pytest.mark.e2e
def test_check_mode_is_what_ci_runs():
    r = subprocess.run([sys.executable, str(gen.ROOT / "bench" / "gen_native_common.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:]
