"""Model generation end to end on CPU: the real plugin drives the REAL litellm client over HTTP
against an OpenAI-compatible stub server on 127.0.0.1 (tests/llm_stub.py), which answers from
canned replies chosen by the problem id that appears in the prompt and records every request.

Each plugin run evaluates several copies of the all_reduce problem at once (one per behaviour
under test); the in-process tests at the end cover extraction, feedback, redaction and the
prompt of every real problem folder.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from kbrun import PROBLEMS, REPO, RING, by_problem, explain, make_tree, run
from llm_stub import StubServer

sys.path.insert(0, str(REPO))

from pytest_kernelbench.candidates import prompt
from pytest_kernelbench.candidates.extract import extract  # noqa: E402
from pytest_kernelbench.candidates.llm import available, cost_of  # noqa: E402
from pytest_kernelbench.metrics import usage  # noqa: E402
from pytest_kernelbench.session import Placement  # noqa: E402
from pytest_kernelbench.spec import shapes
from pytest_kernelbench.spec.problem import load_problem  # noqa: E402

# The plugin runs need litellm (never imported here: only the plugin's subprocesses import it).
needs_litellm = pytest.mark.skipif(not available(), reason="litellm is not installed (pip install '.[llm]')")

MODEL = "openai/kb-stub-model"
PRICED_MODEL = "openai/gpt-4o"      # litellm's offline price map knows it: $2.5/M in, $10/M out
# No LITELLM_LOCAL_MODEL_COST_MAP here: the plugin must set it itself before importing litellm.
ENV = {"OPENAI_API_KEY": "stub-key", "KB_LLM_BACKOFF_S": "0.05"}

GOOD_CODE = RING
WRONG_CODE = GOOD_CODE.replace("    return acc.to(x.dtype)", "    acc[5] += 3.0 if rank == 1 else 0.0\n    return acc.to(x.dtype)")
GOOD = f"Here is a ring all-reduce.\n\n```python\n{GOOD_CODE}```\n"
WRONG = f"Here you go:\n\n```python\n{WRONG_CODE}```\n"
NOCODE = "A fast all-reduce would use NVLink peer writes and a two-shot algorithm; I would start there."


def marker(name: str, category: str = "collective") -> str:
    return f"`{category}/{name}`"


@pytest.fixture(scope="module")
def kbcache(tmp_path_factory) -> Path:
    """One cache for the module's runs: prompts differ by problem id and model, so generations
    never collide, and the shape probe of the all_reduce copies runs once."""
    return tmp_path_factory.mktemp("kb-cache")


def requests_for(main: SimpleNamespace, name: str) -> list[dict]:
    """The main run's requests for one problem, from the list kept when the run ended (a later test
    resets the stub for a run of its own, so the tests pass in any order)."""
    return [r for r in main.requests if marker(name) in StubServer.text_of(r)]


def model_run(root: Path, problems: Path, stub: StubServer, *args, cache: Path, model: str = MODEL,
              report: str | None = None):
    """The plugin on `problems` with the stub as the model's API; (process, JSON report)."""
    extra = [f"--kb-report={root / report}"] if report else []
    proc, doc = run(root, str(problems), f"--kb-model={model}", f"--kb-api-base={stub.url}", "--kb-nproc=2",
                    f"--kb-cache-dir={cache}", "--kb-timeout=60", *args, *extra, env=ENV)
    if report:
        path = root / report
        doc = json.loads(path.read_text()) if path.exists() else None
    return proc, doc


def jsonl(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "report.jsonl").read_text().splitlines()]


def user_text(request: dict) -> str:
    return StubServer.text_of(request)


# ---- one run: pass, mismatch, no code, refinement, rate limit ---------------------------------
MAIN = {
    "llm_good": [{"status": 429}, GOOD],       # rate-limited once, then the right kernel
    "llm_wrong": [WRONG],                      # wrong in every round
    "llm_nocode": [NOCODE],                    # never any code
    "llm_refine": [WRONG, GOOD],               # wrong, then fixed in round 2
    "llm_slow": [{"delay": 4, "reply": NOCODE}, NOCODE],   # first request outlives --kb-request-timeout
    "llm_badreq": [WRONG, {"status": 400, "error": "context too long"}],   # round 2: an API error
}


@pytest.fixture(scope="module")
def main(tmp_path_factory, kbcache):
    if not available():
        pytest.skip("litellm is not installed (pip install '.[llm]')")
    root = tmp_path_factory.mktemp("llm_main")
    problems, _ = make_tree(root, {name: "" for name in MAIN})
    with StubServer({marker(n): replies for n, replies in MAIN.items()}) as stub:
        proc, doc = model_run(root, problems, stub, "--kb-rounds=2", "--kb-request-timeout=2", "-n", "2",
                              cache=kbcache)
        assert doc is not None, proc.stdout + proc.stderr
        yield SimpleNamespace(root=root, problems=problems, stub=stub, proc=proc, doc=doc, cache=kbcache,
                              items=by_problem(doc), requests=list(stub.requests))


def item(ns, name):
    return ns.items[f"collective/{name}"]


@pytest.mark.e2e
def test_correct_canned_kernel_passes(main):
    it = item(main, "llm_good")
    assert it["outcome"] == "passed", explain(it)
    assert it["candidate"]["kind"] == "llm" and it["candidate"]["label"] == f"llm:{MODEL}"
    assert it["round"] == 1 and it["best"] and it["rounds"][0]["outcome"] == "passed"
    assert Path(it["candidate"]["origin"]).read_text() == GOOD_CODE


@pytest.mark.e2e
def test_rate_limit_is_retried_then_succeeds(main):
    it = item(main, "llm_good")
    assert it["llm"]["attempts"] == 2 and it["llm"]["errors"][0]["status"] == 429, it["llm"]
    assert len(requests_for(main, "llm_good")) == 2


@pytest.mark.e2e
def test_request_timeout_is_explicit_and_retried(main):
    it = item(main, "llm_slow")
    first = it["rounds"][0]
    assert first["failure"] == "no_code"          # the retry got the answer
    calls = [r for r in jsonl(main.root) if r["problem"] == "collective/llm_slow" and r["round"] == 1][0]["llm"]
    assert calls["attempts"] == 2 and calls["errors"][0]["error"] == "Timeout", calls
    assert calls["errors"][0]["after_s"] >= 1.5, calls      # --kb-request-timeout=2 fired, not the stub


@pytest.mark.e2e
def test_wrong_kernel_fails_mismatch(main):
    it = item(main, "llm_wrong")
    assert it["outcome"] == "failed" and it["failure"] == "mismatch", explain(it)
    assert "rank 1" in it["message"]
    assert [r["failure"] for r in it["rounds"]] == ["mismatch", "mismatch"]


@pytest.mark.e2e
def test_reply_without_code_fails_no_code(main):
    it = item(main, "llm_nocode")
    assert it["outcome"] == "failed" and it["failure"] == "no_code", explain(it)
    assert "no Python code block" in it["message"] and "NVLink peer writes" in it["message"]
    assert not it.get("job_dir")        # nothing was launched


@pytest.mark.e2e
def test_second_round_fixes_first_and_gets_its_failure(main):
    it = item(main, "llm_refine")
    assert it["outcome"] == "passed" and it["round"] == 2 and it["best"], explain(it)
    assert [r["outcome"] for r in it["rounds"]] == ["failed", "passed"]
    first, second = requests_for(main, "llm_refine")
    assert "Result of your round" not in user_text(first)
    text = user_text(second)
    assert "Failed: mismatch." in text and "rank 1" in text and "max abs error" in text, text[-3000:]
    assert "acc[5] += 3.0 if rank == 1 else 0.0" in text   # the first round's code is shown back
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]


@pytest.mark.e2e
def test_every_round_is_recorded_and_the_best_is_kept(main):
    lines = [r for r in jsonl(main.root) if r["problem"] == "collective/llm_refine"]
    assert sorted((r["round"], r["outcome"], r["best"]) for r in lines) == [(1, "failed", False), (2, "passed", True)]
    assert lines[-1]["best"]
    wrong = [r for r in jsonl(main.root) if r["problem"] == "collective/llm_wrong"]
    assert len(wrong) == 2 and sum(r["best"] for r in wrong) == 1


@pytest.mark.e2e
def test_best_round_is_kept_even_when_a_later_round_is_written_after_it(main):
    lines = [r for r in jsonl(main.root) if r["problem"] == "collective/llm_badreq"]
    assert [(r["round"], r["outcome"], r["best"]) for r in lines] == [(1, "failed", True), (2, "error", False)]
    assert lines[1]["failure"] == "api_error" and "context too long" in lines[1]["message"]
    assert lines[1]["llm"]["attempts"] == 1             # a 400 is not retried
    it = item(main, "llm_badreq")
    assert it["round"] == 1 and it["failure"] == "mismatch" and [r["outcome"] for r in it["rounds"]] == ["failed", "error"]


@pytest.mark.e2e
def test_cost_per_call_and_item(main):
    it = item(main, "llm_refine")
    assert it["llm"]["prompt_tokens"] == 1000 and it["llm"]["completion_tokens"] == 500
    assert it["cost"]["calls"] == 2 and it["cost"]["prompt_tokens"] == 2000 and it["cost"]["completion_tokens"] == 1000
    total = usage.totals(main.doc["items"])
    # answers: good 1 (after a 429), wrong 2, nocode 2, refine 2, slow 2 (after a timeout), badreq 1 (then a 400)
    assert total["calls"] == 10 and total["prompt_tokens"] == 10000
    ledger = json.loads((main.root / "report" / "llm-ledger.json").read_text())
    assert ledger["calls"] == 10 and ledger["prompt_tokens"] == 10000


@pytest.mark.e2e
def test_every_prompt_answer_and_candidate_is_kept(main):
    run_dir = main.root / "report"
    assert (run_dir / "prompts" / "collective-llm_refine-s0-r2.md").read_text().count("Result of your round 1") == 1
    assert (run_dir / "answers" / "collective-llm_refine-s0-r1.md").read_text() == WRONG
    assert (run_dir / "candidates" / "collective-llm_refine-s0-r2.py").read_text() == GOOD_CODE
    assert not (run_dir / "candidates" / "collective-llm_nocode-s0-r1.py").exists()


@pytest.mark.e2e
def test_all_requests_went_to_the_stub_with_the_key(main):
    assert len(main.requests) == 13
    assert all(r["_headers"].get("authorization") == "Bearer stub-key" for r in main.requests)
    assert all(r["model"] == MODEL.split("/", 1)[1] for r in main.requests)


@pytest.mark.e2e
def test_litellm_never_fetches_its_price_map(main):
    out = main.proc.stdout + main.proc.stderr
    assert "cost map" not in out and "raw.githubusercontent.com" not in out


@pytest.mark.e2e
def test_rerun_makes_no_request_and_regenerate_makes_them_again(main):
    main.stub.reset()
    proc, doc = model_run(main.root, main.problems, main.stub, "--kb-rounds=2", "-k", "llm_nocode or llm_wrong",
                          cache=main.cache, report="rerun.json")
    assert doc is not None, proc.stdout + proc.stderr
    assert main.stub.requests == [], [user_text(r)[:200] for r in main.stub.requests]
    items = by_problem(doc)
    assert items["collective/llm_nocode"]["failure"] == "no_code"
    assert items["collective/llm_wrong"]["failure"] == "mismatch"
    assert all(r["cached"] for i in items.values() for r in i["rounds"])
    assert items["collective/llm_wrong"]["cost"] == {**items["collective/llm_wrong"]["cost"], "calls": 0,
                                                     "cached_calls": 2, "usd": 0.0}
    proc, doc = model_run(main.root, main.problems, main.stub, "--kb-rounds=2", "-k", "llm_nocode",
                          "--kb-regenerate", cache=main.cache, report="regen.json")
    assert doc is not None, proc.stdout + proc.stderr
    assert len(main.stub.requests) == 2
    assert by_problem(doc)["collective/llm_nocode"]["cost"]["calls"] == 2


# ---- k samples ---------------------------------------------------------------------------------
@needs_litellm
@pytest.mark.e2e
def test_samples_give_pass_at_k(tmp_path, kbcache):
    problems, _ = make_tree(tmp_path, {"llm_samples": ""})
    with StubServer({marker("llm_samples"): [GOOD, WRONG, NOCODE]}) as stub:
        proc, doc = model_run(tmp_path, problems, stub, "--kb-samples=3", cache=kbcache)
        assert doc is not None, proc.stdout + proc.stderr
        assert len(stub.requests) == 3
    items = sorted(doc["items"], key=lambda i: i["sample"])
    assert [(i["sample"], i["outcome"], i.get("failure")) for i in items] == [
        (0, "passed", None), (1, "failed", "mismatch"), (2, "failed", "no_code")]
    samples = doc["aggregates"]["samples"]
    assert samples["pass@1"] == pytest.approx(1 / 3) and samples["pass@3"] == pytest.approx(1.0)
    assert "fast_1@3" in samples
    assert "2 of 3 samples did not pass" in proc.stdout


# ---- API failures and the budget -------------------------------------------------------------------
@needs_litellm
@pytest.mark.e2e
def test_authentication_error_fails_once_clearly_and_skips_the_rest(tmp_path, kbcache):
    problems, _ = make_tree(tmp_path, {"llm_auth_a": "", "llm_auth_b": "", "llm_auth_c": ""})
    with StubServer({"`collective/llm_auth": [{"status": 401}]}) as stub:
        proc, doc = model_run(tmp_path, problems, stub, cache=kbcache)
        assert doc is not None, proc.stdout + proc.stderr
        assert len(stub.requests) == 1
    outcomes = sorted(i["outcome"] for i in doc["items"])
    assert outcomes == ["error", "skipped", "skipped"], doc["items"]
    err = next(i for i in doc["items"] if i["outcome"] == "error")
    assert err["failure"] == "api_error" and "authentication failed (HTTP 401)" in err["message"]
    assert "API key" in err["message"] and err["llm"]["attempts"] == 1
    for i in doc["items"]:
        if i["outcome"] == "skipped":
            assert "failed earlier in this run" in i["message"]
    assert proc.stdout.count("authentication failed (HTTP 401)") >= 1 and "1 failed, 2 skipped" in proc.stdout


@needs_litellm
@pytest.mark.e2e
def test_budget_smaller_than_one_call_skips_the_rest(tmp_path, kbcache):
    problems, _ = make_tree(tmp_path, {"llm_budget_a": "", "llm_budget_b": "", "llm_budget_c": ""})
    with StubServer({"`collective/llm_budget": [NOCODE]}) as stub:
        proc, doc = model_run(tmp_path, problems, stub, "--kb-max-cost=0.001", model=PRICED_MODEL, cache=kbcache)
        assert doc is not None, proc.stdout + proc.stderr
        assert len(stub.requests) == 1
    spent = [i for i in doc["items"] if i["outcome"] != "skipped"]
    assert len(spent) == 1 and spent[0]["failure"] == "no_code"
    assert spent[0]["cost"]["usd"] == pytest.approx(1000 * 2.5e-6 + 500 * 10e-6)   # $0.0075 > $0.001
    skipped = [i for i in doc["items"] if i["outcome"] == "skipped"]
    assert len(skipped) == 2 and all(i["message"].startswith("budget spent") for i in skipped)
    assert "budget spent" in proc.stdout
    ledger = json.loads((tmp_path / "report" / "llm-ledger.json").read_text())
    assert ledger["calls"] == 1 and ledger["usd"] == pytest.approx(0.0075)


# ---- --kb-print-prompt over every real problem -----------------------------------------------------
def problem_dirs() -> list[Path]:
    return sorted(p.parent for p in PROBLEMS.glob("*/*/problem.yaml"))


def hidden_lines(folder: Path) -> list[str]:
    """harness.py lines of more than 25 characters (imports, comments and lines that also occur
    in the public reference.py or problem.yaml aside) that must never reach a model."""
    public = (folder / "reference.py").read_text() + (folder / "problem.yaml").read_text()
    out = []
    for line in (folder / "harness.py").read_text().splitlines():
        s = line.strip()
        if len(s) > 25 and not s.startswith(("import ", "from ", "#")) and s not in public:
            out.append(s)
    return out


@needs_litellm
@pytest.mark.e2e
def test_print_prompt_writes_prompts_without_any_request(tmp_path):
    with StubServer({}) as stub:
        proc, doc = run(tmp_path, str(PROBLEMS), "--kb-print-prompt", f"--kb-model={MODEL}",
                        f"--kb-api-base={stub.url}", f"--kb-cache-dir={tmp_path / 'cache'}", env=ENV)
        assert doc is not None, proc.stdout + proc.stderr
        assert stub.requests == []
    folders = problem_dirs()
    assert len(doc["items"]) == len(folders)
    # problems that leave a CPU candidate no legal transport skip before any prompt is built
    no_cpu = {f.relative_to(PROBLEMS).as_posix() for f in folders
              if "no_cpu_candidate" in (f / "problem.yaml").read_text()}
    assert no_cpu
    # CUDA-only problems (native CUDA templates) skip at placement on this CPU machine
    cuda_only = {f.relative_to(PROBLEMS).as_posix() for f in folders
                 if "cpu" not in load_problem(f / "problem.yaml", PROBLEMS).devices}
    # multi-node problems skip in a one-node run: a prompt for a placement that cannot run them says nothing
    multi_node = {f.relative_to(PROBLEMS).as_posix() for f in folders
                  if load_problem(f / "problem.yaml", PROBLEMS).nodes > 1}
    assert multi_node
    for i in doc["items"]:
        expected = ("no legal candidate on CPU" if i["problem"] in no_cpu else
                    "needs CUDA GPUs" if i["problem"] in cuda_only else
                    "needs --kb-nodes >= 2" if i["problem"] in multi_node else "prompt written")
        assert i["outcome"] == "skipped" and i["message"].startswith(expected), explain(i)
    for folder in folders:
        pid = folder.relative_to(PROBLEMS).as_posix()
        if pid in no_cpu or pid in cuda_only or pid in multi_node:
            continue
        text = (tmp_path / "report" / "prompts" / f"{pid.replace('/', '-')}.md").read_text()
        assert f"`{pid}`" in text and (folder / "reference.py").read_text().strip() in text
        leaked = [line for line in hidden_lines(folder) if line in text]
        assert not leaked, f"{pid}: harness.py text in the prompt: {leaked}"


@pytest.mark.e2e
def test_no_prompt_of_any_problem_holds_harness_text_on_cpu_or_gpu(tmp_path):
    """Builds every real problem's prompt in-process for a CPU machine and for an 8-GPU one, plus
    a refinement prompt whose failure excerpt quotes a harness traceback."""
    problems = [load_problem(d / "problem.yaml", PROBLEMS) for d in problem_dirs()]
    probed = shapes.probe_many([(p, 8) for p in problems], tmp_path / "shapes")
    assert all(probed), "the shape probe failed"
    for p, info in zip(problems, probed):
        folder = p.path
        hidden = hidden_lines(folder)
        harness = (folder / "harness.py").read_text()
        for placement, machine in ((Placement("cpu", 4, ["tiny"]), CPU_MACHINE),
                                   (Placement("cuda", 8, [s for s in p.sizes if s != "tiny"]), GPU_MACHINE)):
            first = prompt.messages(p, placement, machine, info)
            record = {"outcome": "failed", "failure": "runtime_error",
                      "message": "rank 0: harness.inputs() failed", "log_tail": "\n".join(
                          f'  File "{folder}/harness.py", line {n}, in inputs\n    {line}'
                          for n, line in enumerate(harness.splitlines()))}
            text = prompt.render(prompt.refine_messages(first, [("def solution(x): pass", record)], harness,
                                                        placement.device))
            leaked = [line for line in hidden if line in text]
            assert not leaked, f"{p.id} ({placement.device}): harness.py text in the prompt: {leaked}"
            assert "harness.py" not in text


# ---- in-process pieces ---------------------------------------------------------------------------------
CPU_MACHINE = {"cpu": "AMD EPYC", "cpu_count": 2, "torch": "2.13.0+cpu", "python": "3.11.7", "gpu_count": 0,
               "platform": "Linux"}
GPU_MACHINE = {
    "gpu_count": 8, "gpu_model": "NVIDIA H200", "driver": "570.86.15", "cuda": "12.8", "torch": "2.9.0",
    "nccl": "2.27.3", "python": "3.11.7", "gpus": [{"memory_mib": 143771}] * 8,
    "topology": "\x1b[4m\tGPU0\tGPU1\x1b[0m\nGPU0\t X \tNV18\nGPU1\tNV18\t X ",
    "multicast": {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": None},
    "ceilings": {"link_bw": 450e9, "hbm_bw": 4.8e12, "peak_flops": 989e12, "source": "published H200"},
}


def all_reduce():
    return load_problem(PROBLEMS / "collective/all_reduce/problem.yaml", PROBLEMS)


def test_gpu_prompt_states_the_hardware_as_it_is():
    p = all_reduce()
    text = prompt.task_text(p, Placement("cuda", 4, ["small", "large"]), GPU_MACHINE, None)
    for part in ("8 x NVIDIA H200", "W = 4", "18 bonded NVLinks", "450 GB/s published", "NVLink SHARP is switched off",
                 "CUDA 12.8", "PyTorch 2.9.0", "NCCL 2.27.3", "backend `nccl`", "compute capability 9.0", "132 SMs",
                 "def solution(x: torch.Tensor) -> torch.Tensor: ...", "atol = 0.01", "all_gather_into_tensor",
                 "one_shot_all_reduce", "Any such call fails the item", "size `large` (runs in this evaluation)"):
        assert part in text, part
    assert "Legend" not in text and "NCCL_NVLS_ENABLE" not in text
    assert "\x1b" not in text
    cpu = prompt.task_text(p, Placement("cpu", 2, ["tiny"]), CPU_MACHINE, None)
    # forbid holds on CPU too, and the CPU prompt names what this problem leaves to communicate with
    assert "CPU-only machine" in cpu and "gloo" in cpu and "reported as a warning" not in cpu
    assert "Any such call fails the item (forbidden_call), on every device" in cpu
    assert "The ways to communicate on this run: point-to-point calls (send, recv" in cpu
    ring = load_problem(PROBLEMS / "p2p/ring_send_recv/problem.yaml", PROBLEMS)
    none = prompt.task_text(ring, Placement("cpu", 2, ["tiny"]), CPU_MACHINE, None)
    assert "none: every gloo transport is forbidden for this problem" in none


def test_extraction_rule():
    two = "```python\nimport os\n```\ntext\n```python\ndef solution(x):\n    return 1\n```\n```python\nprint(2)\n```"
    assert extract(two)[0] == "def solution(x):\n    return 1\n"          # the last block defining solution()
    assert extract("```cuda\n__global__ void k() {}\n```")[0] is None   # not Python: no code
    assert extract(NOCODE) == (None, "the answer has no Python code block")
    assert extract("")[0] is None
    cut = extract("```python\ndef solution(x):\n    return x +")     # cut off by the token limit
    assert cut[0].startswith("def solution") and "cut off" in cut[1]
    assert extract("def solution(x):\n    return x\n")[0] == "def solution(x):\n    return x\n"
    assert extract("```py\nx = 1\n```")[0] == "x = 1\n"              # no solution(): compile error later
    assert extract("~~~python\ndef solution(x):\n    return x\n~~~")[0].startswith("def solution")


def test_refinement_rule_and_speed_feedback():
    slow = {"outcome": "passed", "score": 0.8, "sizes": [
        {"name": "small", "speedup": 0.8, "timing": {"reference": {"median_s": 8e-5}, "candidate": {"median_s": 1e-4}},
         "roofline": {"candidate": 0.31}, "roof_s": 3.1e-5, "roof_bound": "link"}]}
    assert prompt.needs_refinement(slow, "cuda") and not prompt.needs_refinement(slow, "cpu")
    assert not prompt.needs_refinement({**slow, "score": 1.3}, "cuda")
    assert prompt.needs_refinement({"outcome": "failed", "failure": "timeout"}, "cpu")
    assert not prompt.needs_refinement({"outcome": "error"}, "cpu")
    text = prompt.feedback(slow, 1)
    assert "0.80x" in text and "size small: reference 80.0 us, yours 100.0 us: 0.80x" in text
    assert "31% of it" in text and "faster" in text
    long = {"outcome": "failed", "failure": "runtime_error", "message": "\n".join(f"line {i}" for i in range(100))}
    assert "[... truncated]" in prompt.feedback(long, 1) and "line 99" not in prompt.feedback(long, 1)


def test_cost_totals():
    calls = [{"prompt_tokens": 10, "completion_tokens": 5, "usd": 0.5, "cached": False},
             {"prompt_tokens": 10, "completion_tokens": 5, "usd": 0.25, "cached": "exact"}]
    c = cost_of(calls)
    assert c["calls"] == 1 and c["cached_calls"] == 1 and c["usd"] == 0.5 and c["cached_usd"] == 0.25
    t = usage.totals([{"cost": c}, {"cost": c}, {"outcome": "skipped"}])
    assert t["usd"] == 1.0 and t["prompt_tokens"] == 20
    assert re.match(r"model cost: \$1\.0000, 20 prompt \+ 10 completion tokens", usage.summary_line(t))
    assert usage.totals([{"outcome": "passed"}]) is None


def test_latest_by_item_keeps_the_best_round():
    from pytest_kernelbench.report import latest_by_item
    r1 = {"nodeid": "n", "sample": None, "round": 1, "best": True}
    r2 = {"nodeid": "n", "sample": None, "round": 2, "best": False}
    plain = [{"nodeid": "m", "sample": None, "x": 1}, {"nodeid": "m", "sample": None, "x": 2}]
    assert latest_by_item([r1, r2] + plain) == [r1, plain[1]]
