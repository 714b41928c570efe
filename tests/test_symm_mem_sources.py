"""The four shipped symm_mem solutions carry byte-identical copies of the shared sources
(bench/symm_mem_common.cu, symm_mem_host.cu, symm_mem_binding.cpp, symm_mem_state.py.in) between
marker lines (bench/gen_symm_mem.py writes them); nothing here needs torch."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gen_symm_mem as gen  # the repo root is on sys.path (pytest ini `pythonpath`)
from pytest_kernelbench.candidates.safety import scan

ROOT = Path(__file__).resolve().parent.parent


def test_the_four_solutions_are_listed():
    ops = sorted(Path(rel).parts[2] for rel in gen.SOLUTIONS)
    assert ops == ["all_gather", "all_reduce", "all_to_all", "reduce_scatter"]
    assert all((ROOT / rel).is_file() for rel in gen.SOLUTIONS)


@pytest.mark.parametrize("rel", gen.SOLUTIONS)
def test_region_markers_present(rel):
    text = (ROOT / rel).read_text(encoding="utf-8")
    found = gen.regions(text, rel)
    assert [src for _, _, src in found] == list(gen.SOURCES)
    lines = text.splitlines(keepends=True)
    for b, e, src in found:
        assert lines[b] == gen.begin_line(src) and lines[e] == gen.end_line(src)
    (common, _, _), (host, host_end, _), (binding, binding_end, _), (tail, _, _) = found
    before = lambda i: "".join(lines[:i])   # noqa: E731
    # device code, then the solution's own kernel, then the host helpers: all in _CUDA_SRC
    assert "_CUDA_SRC = r'''" in before(common) and "kb_kernel" in "".join(lines[common:host])
    assert "'''" not in "".join(lines[common:host_end])
    # the binding is the whole _CPP_SRC string; the Python tail comes after the solution's own sizing
    assert lines[binding - 1] == "_CPP_SRC = r'''\n" and lines[binding_end + 1] == "'''\n"
    assert "def _default_algo" in "".join(lines[binding_end:tail]) and "def solution" in "".join(lines[tail:])


def test_shipped_solutions_match_common_source():
    problems = gen.check()
    assert not problems, "\n".join(problems) + "\nrun: python bench/gen_symm_mem.py"


@pytest.mark.parametrize("src", gen.SOURCES)
def test_copy_is_the_source_body_verbatim(src):
    body = gen.shared_text(ROOT, src)
    assert not body.startswith(("//!", "##"))
    for rel in gen.SOLUTIONS:
        text = (ROOT / rel).read_text(encoding="utf-8")
        assert gen.begin_line(src) + body + gen.end_line(src) in text, rel


def test_the_shared_sources_hold_the_code_the_copies_had():
    assert gen.shared_text(ROOT, gen.COMMON).startswith("#include <cuda_runtime.h>\n")
    assert "kb_launch_t" in gen.shared_text(ROOT, gen.SOURCES[1])
    assert "torch::Tensor run(" in gen.shared_text(ROOT, gen.SOURCES[2])
    assert "def solution(x" in gen.shared_text(ROOT, gen.SOURCES[3])


@pytest.mark.parametrize("rel", (*gen.SOLUTIONS, *gen.SOURCES))
def test_no_multicast_words(rel):
    assert scan((ROOT / rel).read_text(encoding="utf-8")) is None


@pytest.fixture
def tree(tmp_path):
    for rel in (*gen.SOLUTIONS, *gen.SOURCES):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_check_catches_drift_and_generate_repairs_only_the_region(tree):
    rel = gen.SOLUTIONS[1]
    path = tree / rel
    good = path.read_text(encoding="utf-8")
    inside = "#define KB_NPH 2       // barrier phases per launch\n"
    outside = "_THREADS = 512\n"
    assert good.count(inside) == 1 and good.count(outside) == 1
    drifted = good.replace(inside, "#define KB_NPH 3       // barrier phases per launch\n")
    drifted = drifted.replace(outside, "_THREADS = 256\n")   # the solution's own part
    path.write_text(drifted, encoding="utf-8")
    problems = gen.check(tree)
    assert len(problems) == 1 and problems[0].startswith(rel) and "KB_NPH 3" in problems[0]
    assert gen.generate(tree) == [rel]
    assert path.read_text(encoding="utf-8") == good.replace(outside, "_THREADS = 256\n")
    assert gen.check(tree) == []


def test_editing_the_source_makes_every_copy_stale(tree):
    src = tree / gen.COMMON
    src.write_text(src.read_text(encoding="utf-8").replace("#define KB_MAXW 8 ", "#define KB_MAXW 16"),
                   encoding="utf-8")
    assert len(gen.check(tree)) == len(gen.SOLUTIONS)
    assert sorted(gen.generate(tree)) == sorted(gen.SOLUTIONS)
    assert gen.check(tree) == []
    assert all("#define KB_MAXW 16" in (tree / rel).read_text(encoding="utf-8") for rel in gen.SOLUTIONS)


@pytest.mark.parametrize("damage", ["drop_begin", "drop_end", "second_region"])
def test_broken_markers_are_reported(tree, damage):
    rel = gen.SOLUTIONS[2]
    path = tree / rel
    text = path.read_text(encoding="utf-8")
    b, e = gen.begin_line(gen.COMMON), gen.end_line(gen.COMMON)
    text = {"drop_begin": lambda t: t.replace(b, ""),
            "drop_end": lambda t: t.replace(e, ""),
            "second_region": lambda t: t.replace("_CPP_SRC = r'''\n", "_CPP_SRC = r'''\n" + b + e)}[damage](text)
    path.write_text(text, encoding="utf-8")
    problems = gen.check(tree)
    assert len(problems) == 1 and problems[0].startswith(rel)
    with pytest.raises(gen.GenError):
        gen.generate(tree)


def test_forbidden_word_in_source_is_refused(tree):
    src = tree / gen.COMMON
    src.write_text(src.read_text(encoding="utf-8") + "// multimem\n", encoding="utf-8")
    assert all("multicast" in p for p in gen.check(tree))
    with pytest.raises(gen.GenError):
        gen.generate(tree)
    assert all((tree / rel).read_bytes() == (ROOT / rel).read_bytes() for rel in gen.SOLUTIONS)


@pytest.mark.e2e
def test_cli_check_passes_on_the_shipped_tree():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gen_symm_mem.py"), "--check"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_drift_in_the_python_tail_is_caught(tree):
    rel = gen.SOLUTIONS[3]
    path = tree / rel
    good = path.read_text(encoding="utf-8")
    line = "    return _ext.run(x, sid)\n"
    assert good.count(line) == 1
    path.write_text(good.replace(line, "    return x.clone()\n"), encoding="utf-8")
    problems = gen.check(tree)
    assert len(problems) == 1 and "x.clone()" in problems[0]
    assert gen.generate(tree) == [rel] and path.read_text(encoding="utf-8") == good
