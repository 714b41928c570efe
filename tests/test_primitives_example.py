"""Issue 23 item 6: the primitives example every GPU prompt of a rewrite problem carries
(pytest_kernelbench/templates/primitives_example.py) is correct code, not prose.

- its CUDA source compiles for sm_90 with the installed nvcc, and its C++ binding against the
  installed torch headers (skip without nvcc / a C++ compiler);
- on a GPU it runs as a real candidate through the plugin at W = 1 (bench/primitives_example.py:
  correct at every size and trial, and back-to-back timed calls checked after refills);
- it stays clear of the multicast scan and of the words that trip it.
"""
from __future__ import annotations

import ast
import shutil
import subprocess
import sysconfig

import pytest

from bench import primitives_example as bench_example
from pytest_kernelbench.candidates import safety
from pytest_kernelbench.spec.problem import load_problem

EXAMPLE = bench_example.EXAMPLE


def _string_constant(name: str) -> str:
    for node in ast.parse(EXAMPLE.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            assert isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            return node.value.value
    raise AssertionError(f"{name} not found in {EXAMPLE}")


def test_example_is_a_clean_candidate_module():
    text = EXAMPLE.read_text()
    tree = ast.parse(text)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "solution" for n in tree.body)
    assert safety.scan(text) is None
    assert safety.mentions(text) == []          # not even in a comment: the prompt shows it whole
    for word in ("rendezvous", "buffer_ptrs", "load_inline", "st.release.sys", "ld.acquire.sys", "epoch"):
        assert word in text, word


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.e2e
def test_cuda_source_compiles_for_sm90(tmp_path):
    src = tmp_path / "example.cu"
    src.write_text(_string_constant("CUDA_SRC"))
    proc = subprocess.run(["nvcc", "-arch=sm_90", "-c", str(src), "-o", str(tmp_path / "example.o")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
@pytest.mark.e2e
def test_binding_compiles_against_the_installed_torch_headers(tmp_path):
    from torch.utils.cpp_extension import include_paths
    src = tmp_path / "binding.cpp"     # what load_inline makes of cpp_sources + functions=[...]
    src.write_text("#include <torch/extension.h>\n" + _string_constant("CPP_SRC") +
                   '\nPYBIND11_MODULE(example, m) {\n'
                   'm.def("add_neighbour", torch::wrap_pybind_function(add_neighbour), "add_neighbour");\n}\n')
    includes = [f"-I{p}" for p in [*include_paths(), sysconfig.get_paths()["include"]]]
    proc = subprocess.run(["g++", "-std=c++17", "-w", "-fsyntax-only", *includes, str(src)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_bench_problem_is_a_valid_problem(tmp_path):
    problems, solutions = bench_example.make_tree(tmp_path)
    p = load_problem(problems / bench_example.PROBLEM / "problem.yaml", problems)
    assert 1 in p.world_sizes and list(p.devices) == ["cuda"]
    assert (solutions / bench_example.PROBLEM).with_suffix(".py").read_text() == EXAMPLE.read_text()


def _cuda_gpus() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken CUDA install is no GPU here
        return 0


@pytest.mark.skipif(_cuda_gpus() < 1, reason="needs a CUDA GPU")
@pytest.mark.e2e
def test_example_runs_as_a_candidate_at_w1(tmp_path):
    result = bench_example.run(nproc=1, out_dir=tmp_path)
    assert result["outcome"] == "passed", result
    assert {s["name"] for s in result["sizes"]} == {"tiny", "odd", "small", "medium"}
    assert (tmp_path / "primitives_example-w1.json").is_file()


@pytest.mark.skipif(_cuda_gpus() < 2, reason="needs 2 CUDA GPUs")
@pytest.mark.e2e
def test_example_runs_as_a_candidate_at_w2(tmp_path):
    result = bench_example.run(nproc=2, out_dir=tmp_path)
    assert result["outcome"] == "passed", result
