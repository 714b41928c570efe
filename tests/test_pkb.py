"""ParallelKernelBench under our harness (issue 14, CPU part), on a PKB-format fixture tree of our
own (pkb_fixture.py): collection as pkb/<N>_<name> with taxonomy markers, PKB's generator run in
the ranks with our nonce, forbid, the multicast refusal, deadlines, PKB's candidate layout and our
`utils` shim, and the usage error for a path that is no checkout."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from kbrun import REPO, inner_env, plugin_args, run
from pkb_fixture import make_checkout, make_solutions

sys.path.insert(0, str(REPO))
from pytest_kernelbench.pkb import checkout, taxonomy  # noqa: E402
from pytest_kernelbench.problem import CATEGORIES, ProblemError  # noqa: E402


def pytest_run(cwd, *args, timeout=120):
    cmd = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=inner_env())


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory):
    """One plugin run (two xdist workers: the controller's checks see PKB items too) over the
    fixture tree with one candidate per behaviour."""
    root = tmp_path_factory.mktemp("pkb")
    pkb, solutions = make_checkout(root / "pkb"), make_solutions(root / "solutions")
    proc, doc = run(root, f"--kb-pkb={pkb}", f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timeout=20",
                    "-n", "2", timeout=300)
    assert doc is not None, proc.stdout + proc.stderr
    return {"root": root, "pkb": pkb, "proc": proc, "doc": doc, "items": {i["problem"]: i for i in doc["items"]}}


def test_every_reference_is_an_item_with_its_outcome(fixture_run):
    items = fixture_run["items"]
    outcomes = {k: (v["outcome"], v.get("failure")) for k, v in items.items()}
    assert outcomes == {
        "pkb/1_allreduce": ("passed", None),
        "pkb/3_broadcast": ("failed", "mismatch"),
        "pkb/4_reduce": ("error", "invalid_problem"),
        "pkb/5_scatter": ("failed", "unsafe"),
        "pkb/6_gather": ("passed", None),
        "pkb/7_reducescatter": ("failed", "forbidden_call"),
        "pkb/8_alltoall": ("failed", "timeout"),
        "pkb/13_gemm_allreduce": ("skipped", None),
    }
    ok = items["pkb/1_allreduce"]
    assert ok["nodeid"].endswith("reference/1_allreduce.py::test_problem[pkb/1_allreduce]")
    assert (ok["world_size"], ok["device"], [s["name"] for s in ok["sizes"]]) == (2, "cpu", ["tiny"])
    # taxonomy tags and a derived roofline model (all-reduce of a 128 x 128 bfloat16 block)
    assert (ok["category"], ok["parallelism"]) == ("collective", ["dp"])
    assert ok["sizes"][0]["cost"]["link_bytes"] == 128 * 128 * 2
    assert ok["compile_s"] >= 1.5        # its first call "compiles" (sleeps 2 s): setup, off the deadline


def test_the_report_of_pkb_items_validates(fixture_run):
    import json

    import jsonschema
    schema = json.loads((REPO / "pytest_kernelbench" / "schemas" / "report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(fixture_run["doc"])


def test_fixed_pkb_inputs_never_reach_candidates(fixture_run):
    # rank 0 of PKB's broadcast holds the constant 1.0: right under PKB's inputs, wrong under ours
    msg = fixture_run["items"]["pkb/3_broadcast"]["message"]
    assert msg.startswith("rank ") and "trial 0" in msg and "values differ" in msg
    # the passing candidate raises on constant inputs and imports utils.cuda_helpers (our shim)
    assert fixture_run["items"]["pkb/1_allreduce"]["outcome"] == "passed"


def test_failure_messages_name_the_cause(fixture_run):
    items = fixture_run["items"]
    assert "all_reduce" in items["pkb/7_reducescatter"]["message"]
    assert "trial 1" in items["pkb/7_reducescatter"]["message"]        # the first call is setup
    assert "'multimem' at line 2" in items["pkb/5_scatter"]["message"]
    assert items["pkb/5_scatter"].get("wall_s") is None                 # refused before launch
    assert "solution.py line" in items["pkb/8_alltoall"]["message"]
    assert "missing function 'solution()'" in items["pkb/4_reduce"]["message"]
    assert "needs CUDA GPUs" in items["pkb/13_gemm_allreduce"]["message"]


def test_in_place_flag_read_from_the_reference_lets_a_candidate_return_its_input(fixture_run):
    # PKB's gather returns its input on non-root ranks; a candidate doing the same is no aliasing error
    assert fixture_run["items"]["pkb/6_gather"]["outcome"] == "passed"


def test_reference_self_check_runs_pkb_own_file(tmp_path):
    """The acid test PKB items get on GPUs: the reference against itself (collectives allowed)."""
    pkb = make_checkout(tmp_path / "pkb")
    proc, doc = run(tmp_path, f"--kb-pkb={pkb}", "--kb-candidate=reference", "--kb-nproc=2", "--kb-timing=off",
                    "-k", "1_allreduce", timeout=300)
    assert doc is not None, proc.stdout + proc.stderr
    (item,) = doc["items"]
    assert (item["problem"], item["outcome"]) == ("pkb/1_allreduce", "passed"), proc.stdout[-3000:]
    assert item["candidate"]["kind"] == "reference" and item["candidate"]["origin"].endswith("1_allreduce/reference.py")


def test_markers_select_by_taxonomy(tmp_path):
    pkb = make_checkout(tmp_path / "pkb")
    proc = pytest_run(tmp_path, f"--kb-pkb={pkb}", "--collect-only", "--strict-markers", "-m", "pkb and tp")
    ids = sorted(re.findall(r"test_problem\[(pkb/[^\]]+)\]", proc.stdout))
    assert ids == ["pkb/13_gemm_allreduce", "pkb/7_reducescatter"], proc.stdout + proc.stderr


@pytest.mark.parametrize("args, expected", [
    (["--kb-pkb={tmp}/nothing"], "not a ParallelKernelBench checkout (not a directory)"),
    (["--kb-pkb={tmp}"], "not a ParallelKernelBench checkout (no reference/<N>_<name>.py files)"),
    (["--kb-pkb-backend=rust"], "--kb-pkb-backend='rust': expected cuda or triton"),
])
def test_bad_pkb_options_are_one_line_usage_errors(tmp_path, args, expected):
    proc = pytest_run(tmp_path, *[a.format(tmp=tmp_path) for a in args])
    err = proc.stderr.strip()
    assert proc.returncode == 4 and expected in err and len(err.splitlines()) == 1, err


# ---- in the pytest process: collection facts, the rank-side adapter, the shim --------------------
def test_taxonomy_maps_all_87_problems_to_known_tags():
    numbers = {int(stem.split("_")[0]) for stem in taxonomy.TAXONOMY}
    assert numbers == set(range(1, 88))
    for stem, _ in taxonomy.TAXONOMY.items():
        category, tags, facts = taxonomy.entry(stem)
        assert category in CATEGORIES and set(tags) <= set(taxonomy.TAGS), stem
        assert set(facts) <= {"cpu", "cost", "large", "inplace", "world_sizes", "timeout_s"}, stem
        assert facts.get("cost") in (None, *taxonomy.COSTS), stem
    assert taxonomy.entry("999_unknown") == ("utility", (), {})


def test_problems_from_a_checkout(tmp_path):
    pkb = make_checkout(tmp_path / "pkb")
    (pkb / "reference" / "21_fixed_shapes.py").write_text("def solution(x):\n    return x * 2\n")
    loaded = dict(checkout.load_problems(checkout.check_checkout(str(pkb)), tmp_path / "cache"))
    assert isinstance(loaded["4_reduce"], ProblemError)
    p = loaded["1_allreduce"]
    assert p.id == "pkb/1_allreduce" and p.devices == ("cpu", "cuda") and p.dtype == "bfloat16"
    assert p.sizes == {"tiny": {"m": 128, "n": 128}, "default": {"m": 1024, "n": 1024}, "large": {"m": 4096, "n": 4096}}
    assert p.reference_path.is_symlink() and p.reference_path.resolve() == pkb / "reference" / "1_allreduce.py"
    assert "harness(" in p.harness_path.read_text() and (pkb / "reference") in p.protected
    assert p.forbid == ("collectives", "symm_mem_ops") and p.tolerance == {"atol": 0.01, "rtol": 0.01}
    assert checkout.markers(loaded["13_gemm_allreduce"]) == ["pkb", "fusion", "tp", "nccl"]
    assert loaded["13_gemm_allreduce"].devices == ("cuda",)
    assert "large" not in loaded["21_fixed_shapes"].sizes          # its generator branch ignores M, N
    assert loaded["6_gather"].inplace and not loaded["1_allreduce"].inplace


@pytest.mark.parametrize("body, writes", [
    ("out = x.clone()\n    dist.all_reduce(out)\n    return out", False),
    ("dist.all_reduce(x)\n    return x.clone()", True),
    ("x.add_(1)\n    return x.clone()", True),
    ("for g in x:\n        g.data.mul_(2)\n    return None", True),
    ("x[0] = 1\n    return x.clone()", True),
    ("if dist.get_rank():\n        return x\n    return x.clone()", True),
    ("dist.send(x, 1)\n    return x.clone()", False),
    ("n = dist.get_world_size(y)\n    return x.repeat(n)", False),
])
def test_reference_writing_or_returning_an_argument_is_in_place(body, writes):
    import ast
    fn = ast.parse(f"def solution(x, y=None):\n    {body}\n").body[0]
    assert checkout.writes_inputs(fn) is writes


def test_adapter_inputs_are_pkb_shapes_with_our_values(tmp_path, monkeypatch):
    import torch
    from pytest_kernelbench.pkb import adapter
    monkeypatch.setattr(sys, "path", list(sys.path))     # the adapter puts the shim on it
    pkb = make_checkout(tmp_path / "pkb")
    size, cpu, bf16 = {"m": 16, "n": 8}, torch.device("cpu"), torch.bfloat16

    def call(number, rank, seed, shared):
        inputs, _ = adapter.harness(str(pkb), number)
        return inputs(size, rank, 2, torch.Generator().manual_seed(seed), cpu, bf16, shared_seed=shared)

    state = torch.get_rng_state()
    (a,), (b,) = call(1, 0, 1, 9), call(1, 1, 2, 9)
    assert torch.equal(torch.get_rng_state(), state)                 # no seed leaks to candidates
    assert a.shape == (16, 8) and a.dtype == bf16 and not torch.equal(a, b)
    assert len(a.unique()) > 4 and bool(((a.float() * 8) == (a.float() * 8).round()).all())   # exact sums
    assert torch.equal(call(1, 0, 1, 9)[0], a)                       # reproducible from the seeds alone
    shared0, own0, scalar = call(20, 0, 1, 5)
    shared1, own1, _ = call(20, 1, 2, 5)
    assert scalar == 0.5 and torch.equal(shared0, shared1) and not torch.equal(own0, own1)
    assert not torch.equal(call(20, 0, 1, 6)[0], shared0)            # a new run, new shared data
    torch.manual_seed(11 + 700 + 0)                                   # PKB's own seed for problem 7, rank 0
    assert not torch.equal(call(7, 0, 1, 5)[0], torch.randn((32, 8), dtype=bf16))


def test_adapter_cost_and_cached_groups(tmp_path, monkeypatch):
    import torch
    import torch.distributed as dist
    from pytest_kernelbench.pkb import adapter
    monkeypatch.setattr(sys, "path", list(sys.path))
    pkb = make_checkout(tmp_path / "pkb")
    _, cost = adapter.harness(str(pkb), 1, "all_reduce")
    assert cost({"m": 4, "n": 8}, 4, torch.bfloat16) == {"link_bytes": 96.0, "hbm_bytes": 128, "flops": 24.0}
    assert adapter.harness(str(pkb), 13, None)[1]({"m": 4, "n": 8}, 4, torch.bfloat16) == {}
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        inputs, _ = adapter.harness(str(pkb), 22)
        gen = torch.Generator().manual_seed(0)
        first = inputs({"m": 2, "n": 2}, 0, 1, gen, torch.device("cpu"), torch.float32, shared_seed=1)[1]
        again = inputs({"m": 2, "n": 2}, 0, 1, gen, torch.device("cpu"), torch.float32, shared_seed=2)[1]
        assert first is again                   # made once: later calls may run on some ranks only
    finally:
        dist.destroy_process_group()


def test_shim_compile_cuda_extension_is_load_inline_as_pkb_calls_it(monkeypatch):
    import importlib.util
    import torch.utils.cpp_extension as ext
    from pytest_kernelbench.pkb.adapter import SHIM
    spec = importlib.util.spec_from_file_location("_shim_cuda_helpers", f"{SHIM}/utils/cuda_helpers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    seen = {}
    monkeypatch.setattr(ext, "load_inline", lambda **kw: seen.update(kw) or "module")
    assert mod.compile_cuda_extension("k", "__global__ void f() {}", extra_cuda_cflags=["-lineinfo"]) == "module"
    assert seen["name"] == "k" and seen["cpp_sources"] == "" and seen["with_cuda"] is True
    assert seen["cuda_sources"] == "__global__ void f() {}" and seen["extra_cuda_cflags"] == ["-O3", "-lineinfo"]


def test_solutions_in_pkb_layout_follow_the_backend(tmp_path):
    from pytest_kernelbench.candidates.files import from_directory
    pkb = make_checkout(tmp_path / "pkb")
    problem = dict(checkout.load_problems(checkout.check_checkout(str(pkb)), tmp_path / "cache"))["1_allreduce"]
    sols = tmp_path / "sols"
    sols.mkdir()
    (sols / "1_allreduce_triton.py").write_text("def solution(x):\n    return x\n")
    assert from_directory(problem, sols, "triton").origin == str(sols / "1_allreduce_triton.py")
    missing = from_directory(problem, sols, "cuda")
    assert missing.failure[0] == "no_code" and "(expected <dir>/1_allreduce_cuda.py)" in missing.failure[1]
