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
from pytest_kernelbench.spec.problem import CATEGORIES, ProblemError  # noqa: E402


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


@pytest.mark.e2e
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
        "pkb/12_allgather_gemm": ("failed", "forbidden_call"),
        "pkb/18_tp_rms_norm": ("skipped", None),
        "pkb/19_blocked_fp8_quantize": ("failed", "compile_error"),
        "pkb/70_torchrec_kjt_all2all": ("passed", None),
    }
    ok = items["pkb/1_allreduce"]
    assert ok["nodeid"] == "pkb/1_allreduce.py::test_problem[pkb/1_allreduce]"      # no path of this machine
    assert (ok["world_size"], ok["device"], [s["name"] for s in ok["sizes"]]) == (2, "cpu", ["tiny"])
    # taxonomy tags and a derived roofline model (all-reduce of a 64 x 64 bfloat16 block)
    assert (ok["category"], ok["parallelism"]) == ("collective", ["dp"])
    assert ok["sizes"][0]["cost"]["link_bytes"] == 64 * 64 * 2
    assert ok["compile_s"] >= 1.5        # its first call "compiles" (sleeps 2 s): setup, off the deadline


@pytest.mark.e2e
def test_the_report_of_pkb_items_validates(fixture_run):
    import json

    import jsonschema
    schema = json.loads((REPO / "pytest_kernelbench" / "schemas" / "report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(fixture_run["doc"])


@pytest.mark.e2e
def test_fixed_pkb_inputs_never_reach_candidates(fixture_run):
    # rank 0 of PKB's broadcast holds the constant 1.0: right under PKB's inputs, wrong under ours
    msg = fixture_run["items"]["pkb/3_broadcast"]["message"]
    assert msg.startswith("rank ") and "trial 0" in msg and "values differ" in msg
    # the passing candidate raises on constant inputs and imports utils.cuda_helpers (our shim)
    assert fixture_run["items"]["pkb/1_allreduce"]["outcome"] == "passed"


@pytest.mark.e2e
def test_failure_messages_name_the_cause(fixture_run):
    items = fixture_run["items"]
    assert "all_reduce" in items["pkb/7_reducescatter"]["message"]
    assert "trial 1" in items["pkb/7_reducescatter"]["message"]        # the first call is setup
    assert "'multimem' at line 2" in items["pkb/5_scatter"]["message"]
    assert items["pkb/5_scatter"].get("wall_s") is None                 # refused before launch
    assert "solution.py line" in items["pkb/8_alltoall"]["message"]
    assert items["pkb/4_reduce"]["message"] == "reference/4_reduce.py: missing function 'solution()'"


@pytest.mark.e2e
def test_in_place_flag_read_from_the_reference_lets_a_candidate_return_its_input(fixture_run):
    # PKB's gather returns its input on non-root ranks; a candidate doing the same is no aliasing error
    assert fixture_run["items"]["pkb/6_gather"]["outcome"] == "passed"


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """One run of PKB's own reference against itself on a git checkout of the fixture, read by the
    self-check test and the resume test (both asked for exactly this run)."""
    root = tmp_path_factory.mktemp("reference")
    pkb = _git_checkout(root / "pkb")
    # by node id: a -k selection would also hold 4_reduce, which does not load (issue 45)
    proc, doc = run(root, f"--kb-pkb={pkb}", "--kb-candidate=reference", "--kb-nproc=2", "--kb-timing=off",
                    "pkb/1_allreduce.py", timeout=300)
    return root, pkb, proc, doc


@pytest.mark.e2e
def test_reference_self_check_runs_pkb_own_file(reference_run):
    """The acid test PKB items get on GPUs: the reference against itself (collectives allowed)."""
    _, _, proc, doc = reference_run
    assert doc is not None, proc.stdout + proc.stderr
    (item,) = doc["items"]
    assert (item["problem"], item["outcome"]) == ("pkb/1_allreduce", "passed"), proc.stdout[-3000:]
    assert item["candidate"]["kind"] == "reference" and item["candidate"]["origin"] == "reference/1_allreduce.py"


@pytest.mark.e2e
def test_markers_select_by_taxonomy(tmp_path):
    pkb = make_checkout(tmp_path / "pkb")
    proc = pytest_run(tmp_path, f"--kb-pkb={pkb}", "--collect-only", "--strict-markers", "-m", "pkb and tp")
    ids = sorted(re.findall(r"test_problem\[(pkb/[^\]]+)\]", proc.stdout))
    # 4_reduce does not load (no solution()): no marker to match, so it stays in every selection (issue 45)
    assert ids == ["pkb/12_allgather_gemm", "pkb/18_tp_rms_norm", "pkb/4_reduce", "pkb/7_reducescatter"], \
        proc.stdout + proc.stderr


@pytest.mark.parametrize("args, expected", [
    (["--kb-pkb={tmp}/nothing"], "not a ParallelKernelBench checkout (not a directory)"),
    (["--kb-pkb={tmp}"], "not a ParallelKernelBench checkout (no reference/<N>_<name>.py files)"),
    (["--kb-pkb-backend=rust"], "--kb-pkb-backend='rust': expected cuda, triton or parallelkittens"),
])
@pytest.mark.e2e
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
    assert p.sizes == {"tiny": {"m": 64, "n": 64}, "default": {"m": 1024, "n": 1024}, "large": {"m": 4096, "n": 4096}}
    assert p.reference_path.is_symlink() and p.reference_path.resolve() == pkb / "reference" / "1_allreduce.py"
    assert "harness(" in p.harness_path.read_text() and (pkb / "reference") in p.protected
    assert p.forbid == ("collectives", "symm_mem_ops") and p.tolerance == {"atol": 0.01, "rtol": 0.01}
    assert checkout.markers(loaded["19_blocked_fp8_quantize"]) == ["pkb", "utility", "fsdp", "nccl"]
    assert loaded["19_blocked_fp8_quantize"].devices == ("cuda",)
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
    assert from_directory(problem, sols, "triton").origin == "sols/1_allreduce_triton.py"
    missing = from_directory(problem, sols, "cuda")
    assert missing.failure[0] == "no_code" and "(expected <dir>/1_allreduce_cuda.py)" in missing.failure[1]


# ---- issue 22: PKB for real -----------------------------------------------------------------------
def test_published_solution_names_pair_with_their_references(tmp_path):
    """Item 1: PKB's published folders number 11, 12, 14, 18 and 34-88 differently from the
    references; name matching alone would pair 12_gemm_allgather with reference 14."""
    from pytest_kernelbench.candidates.files import from_directory
    from pytest_kernelbench.pkb import pairing
    sols = tmp_path / "solutions_cuda_x"
    sols.mkdir()
    for name in ("1_allreduce", "12_gemm_allgather", "14_gemm_allscatter", "18_rms_norm", "34_ulysses_all_to_all_tensor_primitive",
                 "47_fsdp_adamw_sharded", "48_fsdp_step_e2e", "89_made_up", "3_broadcast"):
        (sols / f"{name}_cuda.py").write_text("def solution(x):\n    return x\n")
    (sols / "3_broadcast_triton.py").write_text("")                     # another backend's file: not this pairing's
    stems = ["1_allreduce", "3_broadcast", "12_allgather_gemm", "14_gemm_allgather", "18_tp_rms_norm",
             "33_ulysses_all_to_all_tensor_primitive", "46_gemv_decode", "47_fsdp_step_e2e"]    # HEAD-like: no 46_fsdp_adamw
    pairs = pairing.pair(sols, "cuda", stems)
    assert pairs.exact == {"1_allreduce": "1_allreduce_cuda.py", "3_broadcast": "3_broadcast_cuda.py"}
    assert pairs.renamed == {"12_allgather_gemm": "12_gemm_allgather_cuda.py", "14_gemm_allgather": "14_gemm_allscatter_cuda.py",
                             "18_tp_rms_norm": "18_rms_norm_cuda.py",
                             "33_ulysses_all_to_all_tensor_primitive": "34_ulysses_all_to_all_tensor_primitive_cuda.py",
                             "47_fsdp_step_e2e": "48_fsdp_step_e2e_cuda.py"}
    assert pairs.unpaired == [
        "47_fsdp_adamw_sharded_cuda.py: PKB's published layout names reference 46_fsdp_adamw_sharded, which this "
        "checkout does not have",
        "89_made_up_cuda.py: no reference 89_made_up in this checkout"]
    # the candidate of an item is the file that pairs with it, named in the record without this machine's path
    pkb = make_checkout(tmp_path / "pkb")
    problem = dict(checkout.load_problems(checkout.check_checkout(str(pkb)), tmp_path / "cache"))["12_allgather_gemm"]
    cand = from_directory(problem, sols, "cuda")
    assert cand.failure is None and cand.origin == "solutions_cuda_x/12_gemm_allgather_cuda.py"
    assert cand.record()["paired_by"] == "published layout"


@pytest.mark.e2e
def test_a_cpu_run_puts_every_pkb_candidate_through_the_static_stages(fixture_run):
    """Items 1, 8, 9 in one run: a published-layout file pairs (12, 18); a file that pairs with no
    reference is reported; a CUDA candidate on a CPU item skips saying so (18) instead of failing
    on CUDA_HOME; a CUDA-only item's candidate still gets its syntax checked (19); a failure only
    by a rule stricter than PKB's names the rule (12: a dist.barrier())."""
    items, doc = fixture_run["items"], fixture_run["doc"]
    barrier = items["pkb/12_allgather_gemm"]
    assert barrier["candidate"]["origin"] == "solutions/12_gemm_allgather_cuda.py"
    assert barrier["rule"] == "forbidden_barrier" and barrier["message"].endswith("(rule: forbidden_barrier)")
    assert "barrier" in barrier["message"] and "trial 1" in barrier["message"]
    cuda = items["pkb/18_tp_rms_norm"]
    assert cuda["message"].startswith("needs CUDA: the candidate builds a CUDA extension ('compile_cuda_extension(' at line 9)")
    assert cuda["candidate"]["origin"] == "solutions/18_rms_norm_cuda.py"
    broken = items["pkb/19_blocked_fp8_quantize"]
    assert broken["message"].startswith("solutions/19_blocked_fp8_quantize_cuda.py:1:16: SyntaxError: expected ':'")
    assert doc["config"]["pkb"]["solutions"]["unpaired"] == ["99_no_such_problem_cuda.py: no reference 99_no_such_problem in this checkout"]
    assert doc["config"]["pkb"]["solutions"]["renamed"] == 2
    out = fixture_run["proc"].stdout
    assert "kernelbench: --kb-solutions=solutions: 10 files pair with a reference (2 by the names of PKB's published " \
           "solutions); 1 pair with none (not run):" in out
    assert "99_no_such_problem_cuda.py: no reference 99_no_such_problem in this checkout" in out


@pytest.mark.e2e
def test_seed_dependent_shapes_pass_with_timing(fixture_run):
    """Item 5: 70's generator draws lengths and sizes values by their sum; the timing pass refills
    its buffers in place, which needs the same shapes every call of a size and rank."""
    item = fixture_run["items"]["pkb/70_torchrec_kjt_all2all"]
    assert item["outcome"] == "passed" and item["sizes"][0]["timing"]["candidate"]["iters"]


def test_adapter_pins_only_the_draws_that_decide_shapes(tmp_path, monkeypatch):
    import torch

    from pytest_kernelbench.pkb import adapter
    monkeypatch.setattr(sys, "path", list(sys.path))
    pkb = make_checkout(tmp_path / "pkb")
    inputs, _ = adapter.harness(str(pkb), 70)
    size = {"m": 8, "n": 8}
    calls = [inputs(size, 0, 2, torch.Generator().manual_seed(k), torch.device("cpu"), torch.bfloat16, shared_seed=10 + k)
             for k in range(6)]
    assert len({tuple(c[1].shape) for c in calls}) == 1                    # the same shapes on every call
    assert all(torch.equal(c[0], calls[0][0]) for c in calls)              # lengths: pinned for the run
    assert len({c[1].float().sum().item() for c in calls}) == 6            # values: new every call
    # in every run: new draws can repeat a sum by chance, so one probe is not proof that shapes are fixed
    for run_seed in range(40):
        fresh, _ = adapter.harness(str(pkb), 70)
        got = {tuple(fresh(size, 0, 2, torch.Generator().manual_seed(run_seed * 10 + k), torch.device("cpu"),
                           torch.bfloat16, shared_seed=run_seed * 10 + k)[1].shape) for k in range(4)}
        assert len(got) == 1, run_seed
    # another run's first call pins other lengths (the secret seed decides them, not PKB's fixed seed)
    firsts = {tuple(adapter.harness(str(pkb), 70)[0](size, 0, 2, torch.Generator().manual_seed(s), torch.device("cpu"),
                                                     torch.bfloat16, shared_seed=s)[0].tolist()) for s in range(100, 104)}
    assert len(firsts) > 1
    # a generator whose shapes never move pins nothing: 7's values differ call to call
    seven, _ = adapter.harness(str(pkb), 7)
    a, b = (seven(size, 0, 2, torch.Generator().manual_seed(k), torch.device("cpu"), torch.bfloat16, shared_seed=k)[0]
            for k in (1, 2))
    assert a.shape == b.shape and not torch.equal(a, b)


def test_cpu_eligibility_and_tiny_come_from_the_census(tmp_path, monkeypatch):
    """Item 3: which references run on gloo is the census's evidence (eligibility.py), with its reason
    where not; a stem the census never saw is CUDA only, saying so; KB_PKB_CPU=all forces them all."""
    from pytest_kernelbench.pkb import eligibility
    monkeypatch.setattr(eligibility, "CPU", {"1_allreduce": {"world_sizes": [2, 4]},
                                             "6_gather": {"world_sizes": [2, 4], "tiny": {"m": 128, "n": 64}},
                                             "7_reducescatter": {"reason": "fails on gloo: a made-up reason"}})
    monkeypatch.delenv(checkout.FORCE_CPU, raising=False)
    pkb = make_checkout(tmp_path / "pkb")
    loaded = dict(checkout.load_problems(checkout.check_checkout(str(pkb)), tmp_path / "cache"))
    assert loaded["1_allreduce"].devices == ("cpu", "cuda") and loaded["1_allreduce"].sizes["tiny"] == {"m": 64, "n": 64}
    assert loaded["6_gather"].sizes["tiny"] == {"m": 128, "n": 64}
    assert loaded["7_reducescatter"].devices == ("cuda",) and loaded["7_reducescatter"].cpu_note == "fails on gloo: a made-up reason"
    assert loaded["3_broadcast"].devices == ("cuda",) and "not in the CPU census" in loaded["3_broadcast"].cpu_note
    monkeypatch.setenv(checkout.FORCE_CPU, "all")
    forced = dict(checkout.load_problems(checkout.check_checkout(str(pkb)), tmp_path / "cache2"))
    assert all(p.devices == ("cpu", "cuda") for p in forced.values() if not isinstance(p, ProblemError))


def test_the_census_and_the_eligibility_agree():
    """eligibility.py is the committed census's verdict: every reference it runs on CPU passed on
    gloo at each world size of the forced census, every other one carries the census's reason."""
    import json

    from pytest_kernelbench.pkb import eligibility
    census = json.loads((REPO / eligibility.SOURCE).read_text())
    forced = [r for r in census["references"] if r["forced"]]
    assert {r["world_size"] for r in forced} == {2, 4}
    outcomes: dict[str, set] = {}
    for run_ in forced:
        for row in run_["items"]:
            outcomes.setdefault(row["problem"].split("/", 1)[1], set()).add(row["outcome"])
    assert set(outcomes) == set(eligibility.CPU)
    for stem, entry in eligibility.CPU.items():
        assert (outcomes[stem] == {"passed"}) == ("reason" not in entry), stem
    chosen = [r for r in census["references"] if not r["forced"]]
    assert {r["world_size"] for r in chosen} == {2, 4}
    for run_ in chosen:      # with the eligibility: every item passed or skipped with the census's reason
        assert {row["outcome"] for row in run_["items"]} <= {"passed", "skipped"}
        for row in run_["items"]:
            stem = row["problem"].split("/", 1)[1]
            assert (row["outcome"] == "passed") == ("reason" not in eligibility.CPU[stem]), stem


def _git_checkout(root):
    pkb = make_checkout(root)
    git = ["git", "-C", str(pkb), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "fixture"], check=True)
    return pkb


@pytest.mark.e2e
def test_the_report_names_the_pkb_and_a_resume_needs_the_same_one(reference_run):
    """Item 2: the report records the checkout's commit and hashes (not its path); --kb-resume takes
    the same PKB at another path and refuses another version."""
    import json
    import shutil
    tmp_path, pkb, proc, doc = reference_run
    assert doc is not None, proc.stdout + proc.stderr
    facts = checkout.fingerprint(str(pkb))
    assert facts["commit"] and len(facts["commit"]) == 40
    assert doc["config"]["pkb"]["checkout"] == {"name": "pkb", **facts}
    (item,) = doc["items"]
    assert item["run_config"]["pkb"] == facts and str(tmp_path) not in json.dumps(item["run_config"])
    assert str(tmp_path) not in item["candidate"]["origin"] + item["nodeid"]
    jsonl = tmp_path / "report.jsonl"

    moved = tmp_path / "elsewhere" / "pkb"
    shutil.copytree(pkb, moved)                     # the same PKB at another path: the same setting
    proc = pytest_run(tmp_path, f"--kb-pkb={moved}", "--kb-candidate=reference", "--kb-nproc=2", "--kb-timing=off",
                      "pkb/1_allreduce.py", f"--kb-resume={jsonl}")
    assert proc.returncode in (0, 5) and "1 deselected" in proc.stdout, proc.stdout + proc.stderr

    gen = moved / "utils" / "input_output_tensors.py"
    gen.write_text(gen.read_text() + "\n# another version\n")
    proc = pytest_run(tmp_path, f"--kb-pkb={moved}", "--kb-candidate=reference", "--kb-nproc=2", "--kb-timing=off",
                      "pkb/1_allreduce.py", f"--kb-resume={jsonl}")
    err = proc.stderr.strip()
    assert proc.returncode == 4 and f"the earlier run used ParallelKernelBench commit {facts['commit'][:12]}" in err, err
    assert "resume with the same PKB or start a new run" in err


@pytest.mark.e2e
def test_node_ids_paste_back_and_paths_collect_only_what_they_name(tmp_path):
    """Item 10: the short summary's node id collects its item again; a path inside the checkout
    collects that reference only and writes nothing into the checkout; --collect-only names no
    report; ParallelKittens is a backend."""
    pkb = make_checkout(tmp_path / "pkb")
    work = tmp_path / "work"
    work.mkdir()

    def collected(*args):
        proc = pytest_run(work, f"--kb-pkb={pkb}", "--collect-only", *args)
        return [ln for ln in proc.stdout.splitlines() if "::test_problem[" in ln], proc

    ids, proc = collected("pkb/3_broadcast.py::test_problem[pkb/3_broadcast]", "pkb/6_gather")
    assert ids == ["pkb/3_broadcast.py::test_problem[pkb/3_broadcast]", "pkb/6_gather.py::test_problem[pkb/6_gather]"], \
        proc.stdout + proc.stderr
    header = next(ln for ln in proc.stdout.splitlines() if ln.startswith("kernelbench: run "))
    assert header.endswith("no report (--collect-only)") and ".json" not in header
    ids, proc = collected(str(pkb / "reference" / "7_reducescatter.py"))
    assert ids == ["pkb/7_reducescatter.py::test_problem[pkb/7_reducescatter]"], proc.stdout + proc.stderr
    assert sorted(p.name for p in pkb.iterdir()) == ["reference", "utils"]       # no .kb-cache, no reports/
    assert (work / ".kb-cache").is_dir()
    ids, proc = collected("--kb-pkb-backend=parallelkittens")
    assert proc.returncode == 0 and len(ids) == 11
    assert [i.split("::")[0] for i in ids][:4] == ["pkb/1_allreduce.py", "pkb/3_broadcast.py", "pkb/4_reduce.py",
                                                   "pkb/5_scatter.py"]
    page = (REPO / "docs" / "pkb.md").read_text()
    assert "https://github.com/togethercomputer/ParallelKernelBench" in page and "parallelkittens" in page


def test_report_table_sorts_pkb_items_by_problem_number():
    from pytest_kernelbench import report
    items = [{"problem": f"pkb/{n}_x", "nodeid": f"pkb/{n}_x.py::test_problem[pkb/{n}_x]", "outcome": "passed"}
             for n in (10, 2, 1, 87, 9)]
    rows = [r.split()[0] for r in report.table(items)[1:]]
    assert rows == ["pkb/1_x", "pkb/2_x", "pkb/9_x", "pkb/10_x", "pkb/87_x"]


def test_static_stages_find_cuda_needs_syntax_and_forbidden_calls():
    from pytest_kernelbench.candidates import Candidate
    from pytest_kernelbench.pkb import static
    assert static.needs_cuda("import triton\n").startswith("needs CUDA: the candidate uses Triton")
    assert static.needs_cuda("import torch\nx = torch.cuda.current_stream()\n").endswith("at line 2)")
    assert static.needs_cuda("import torch\nok = torch.cuda.is_available()\n") is None
    assert static.needs_cuda("from utils.cuda_helpers import compile_cuda_extension\n") is None     # imported, not built
    src = "import torch.distributed as dist\n\ndef solution(x):\n    dist.barrier()\n    dist.all_reduce(x)\n    dist.send(x, 1)\n"
    assert dict(static.forbidden_calls(src)) == {"barrier": 1, "all_reduce": 1}
    assert static.verdict(Candidate("dir", "d", "def solution(:\n", origin="s/1_x.py")) == \
        ("compile_error", "s/1_x.py:1:14: SyntaxError: invalid syntax\n    def solution(:")
    assert static.verdict(Candidate("dir", "d", "OP = 'multimem.st'\n"))[0] == "unsafe"
    assert static.verdict(Candidate("dir", "d", "# multimem\n")) is None       # comments are not judged
    assert static.verdict(Candidate("dir", "d", "OP = 'multimem.st'\n"), allow_multicast=True) is None
