"""Issue 23: what the model is told. No honest answer may fail on a rule the prompt never states;
the hardware section gives what a kernel writer plans with; feedback leads with the cause.

Every real problem's first prompt is rendered in-process for a CPU machine and for the recorded
4x H200 machine (reports/baselines), as a run would render it; feedback is rendered from records
shaped like the ones runs write (some taken from a real CPU run of failing candidates).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kbrun import PROBLEMS, REPO

from bench import gen_prompt_samples
from pytest_kernelbench.candidates import feedback, prompt, safety
from pytest_kernelbench.session import Placement
from pytest_kernelbench.spec import shapes
from pytest_kernelbench.spec.problem import load_problem

GPU_MACHINE = json.loads((REPO / "reports/baselines/2026-11-21-h200x4-all50-reference.json").read_text())["machine"]
CPU_MACHINE = json.loads((REPO / "reports/baselines/2026-11-23-cpu-main-job-80-fork.json").read_text())["machine"]
OWN_CHECK = {"fusion/allreduce_residual_rmsnorm_fp8", "ep/native_dispatch_payload", "ep/moe_dispatch_low_latency",
             "ep/dropless_dispatch_atomics",
             "ep/moe_agrs_dispatch_combine", "ep/moe_dispatch_fp8", "ep/torchrec_kjt_alltoall",
             # atol on the reference's rms (harnesslib.assert_close_scaled, issue 49)
             "fusion/gemm_allreduce", "fusion/gemm_reduce_scatter", "fusion/native_gemm_reduce_scatter",
             "fusion/decode_gemv_allreduce",
             # issue 49: atol on the rms of the expected output
             "p2p/zigzag_ring_attention_backward", "p2p/linear_attn_cp_state_scan"}


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> dict[tuple[str, str], tuple]:
    """(problem id, device) -> (problem, first-round user text) for every real problem."""
    problems = [load_problem(p, PROBLEMS) for p in sorted(PROBLEMS.glob("*/*/problem.yaml"))]
    probed = shapes.probe_many([(p, 4) for p in problems], tmp_path_factory.mktemp("shapes"))
    out = {}
    for p, info in zip(problems, probed):
        for device, machine in (("cpu", CPU_MACHINE), ("cuda", GPU_MACHINE)):
            if device not in p.devices:
                continue
            placement = Placement(device, 4, [s for s in p.sizes if (s == "tiny") == (device == "cpu")])
            out[(p.id, device)] = (p, prompt.messages(p, placement, machine, info)[1]["content"])
    return out


def _contract(problem, text: str) -> str:
    """The part of a prompt the harness writes about checking (never the problem's own text)."""
    start = "## What is computed" if problem.kind == "native" else "## Contract"
    return text[text.index(start):text.index("## Build and rules" if problem.kind == "native" else "## Hardware")]


# ---- rules an honest answer is judged by ---------------------------------------------------------
@pytest.mark.e2e
def test_every_prompt_states_calls_streams_and_global_state_rules(prompts):
    for (pid, device), (p, text) in prompts.items():
        assert "back to back with no barrier" in text and "first call at each size is untimed" in text, pid
        assert "All work must be finished" not in text, pid
        if p.kind == "native":
            continue
        assert "Global torch state" in text and "restore it before solution() returns" in text, pid
        assert "`forbidden_call` under the global torch state rule" in text, pid
        if device == "cuda":
            assert "no torch.cuda.synchronize() is needed" in text and "wait_stream" in text, pid


@pytest.mark.e2e
def test_problems_with_their_own_check_never_claim_allclose(prompts):
    own = {pid for (pid, _), (p, _) in prompts.items() if prompt.has_own_check(p)}
    assert own == OWN_CHECK
    for (pid, device), (p, text) in prompts.items():
        contract = _contract(p, text)
        if pid in OWN_CHECK:
            assert "allclose with atol" not in contract and "this problem's own comparison" in contract, (pid, device)
        else:
            assert "allclose with atol" in contract, (pid, device)


@pytest.mark.e2e
def test_multicast_rule_is_stated_in_words_the_scan_does_not_refuse(prompts):
    for (pid, device), (p, text) in prompts.items():
        ours = text.replace(p.description.strip(), "")    # problem texts are another issue's (24)
        assert safety.mentions(ours) == [], (pid, device, safety.mentions(ours)[:3])
        if device == "cuda":
            assert "NVLink SHARP is switched off" in text and "comments are not judged" in text, pid


@pytest.mark.e2e
def test_primitives_example_is_in_every_gpu_prompt_of_a_rewrite_problem_only(prompts):
    example = prompt.PRIMITIVES_EXAMPLE.read_text().strip()
    for (pid, device), (p, text) in prompts.items():
        assert (example in text) == (device == "cuda" and p.kind != "native"), (pid, device)


def test_forbid_text_names_no_multicast_op():
    assert safety.mentions(prompt.fill("forbid_symm_mem_ops.md")) == []


def test_budgets_in_the_contract_are_the_runs():
    p = load_problem(PROBLEMS / "collective/all_reduce/problem.yaml", PROBLEMS)
    text = prompt.task_text(p, Placement("cuda", 4, ["small"]), GPU_MACHINE, None, compile_budget_s=90, deadline_s=45)
    assert "a budget of 90 s" in text and "deadline of 45 s" in text


@pytest.mark.e2e
def test_arguments_are_named_from_the_signature(prompts):
    _, text = prompts[("collective/all_reduce", "cpu")]
    assert "    - x: bfloat16 tensor [4096]" in text and "arg 0" not in text
    _, text = prompts[("utility/grad_clip_inplace", "cpu")]
    assert "- max_norm: float" in text and "- grads[6k + 1]: float32 tensor" in text and "(k = 0 .. 1)" in text
    _, text = prompts[("collective/ulysses_qkv_exchange", "cpu")]
    assert "repetitions of" not in text


# ---- hardware ----------------------------------------------------------------------------------------
def test_gpu_hardware_section_gives_what_a_kernel_writer_plans_with():
    p = load_problem(PROBLEMS / "collective/all_reduce/problem.yaml", PROBLEMS)
    text = prompt.hardware_text(GPU_MACHINE, Placement("cuda", 4, ["small"]), p)
    for part in ("compute capability 9.0 (sm_90)", "132 SMs", "50 MiB L2", "228 KiB shared memory per SM",
                 "up to 227 KiB per block", "65536 32-bit registers per SM", "bf16 989", "fp8 1979",
                 "450 GB/s published, 307 GB/s measured", "4800 GB/s published, 4287 GB/s measured",
                 "14.3 us measured", "every pair of the 4 GPUs is directly connected by 18 bonded NVLinks",
                 "PyTorch 2.11.0+cu130", "NCCL 2.28.9"):
        assert part in text, part
    for gone in ("Legend", "Connection traversing", "NCCL_NVLS_ENABLE", GPU_MACHINE["platform"], "\x1b"):
        assert gone not in text, gone
    probed = {**GPU_MACHINE, "device": {"compute_capability": "9.0", "sm_count": 78, "source": "driver"},
              "nvcc": "13.0.88", "triton": "3.5.0", "calibration": {}, "ceilings": {"source": "published H200"}}
    text = prompt.hardware_text(probed, Placement("cuda", 4, ["small"]), p)
    assert "78 SMs" in text and "(from the driver)" in text and "nvcc 13.0.88" in text and "Triton 3.5.0" in text
    assert "latency of a flag written into a peer's memory: not measured" in text
    assert "450 GB/s published" in text and "measured" not in text.split("NVLink bandwidth")[1].split("\n")[0]


@pytest.mark.e2e
def test_cpu_prompt_has_no_kernel_build_string(prompts):
    _, text = prompts[("collective/all_reduce", "cpu")]
    assert CPU_MACHINE["platform"] not in text and "PyTorch 2.13.0+cpu" in text


def test_topology_matrix_only_where_links_differ():
    topo = ("\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\nGPU0\t X \tNV4\tSYS\tPIX\t0-1\nGPU1\tNV4\t X \tSYS\tSYS\t0-1\n"
            "GPU2\tSYS\tSYS\t X \tSYS\t2\nNIC0\tPIX\tSYS\tSYS\t X\n\nLegend:\n\n  X    = Self\n")
    text = prompt.topology_text(topo)
    assert "GPU0      X    NV4    SYS" in text and "NIC0" not in text and "CPU Affinity" not in text


# ---- feedback ----------------------------------------------------------------------------------------
# a real record's message (a CPU run, gloo): harness frames, a temporary job path, a C++ source prefix
DEADLOCK = {
    "outcome": "failed", "failure": "runtime_error", "llm": {"finish_reason": "stop"},
    "message": "rank 0: size tiny, trial 0: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/"
               "tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation to complete\n"
               "Traceback (most recent call last):\n"
               '  File "/work/x/pytest_kernelbench/worker/main.py", line 244, in call_candidate\n'
               "    out = self.candidate(*args)\n          ^^^^^^^^^^^^^^^^^^^^^\n"
               '  File "/tmp/fb/run/report/jobs/collective-deadlock-45bcd0/candidate/solution.py", line 7, in solution\n'
               "    dist.recv(buf, 1)\n"
               '  File "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2799, in recv\n'
               "    work.wait()\n"
               "RuntimeError: Timed out waiting 10000ms for recv operation to complete (other ranks: rank 1: size "
               "tiny, trial 0, waiting for peers (first call: setup/compile): torch.distributed.DistNetworkError: "
               "Connection reset by peer)",
    "log_tail": "--- rank 0 ---\n[W1126 11:40:54.003621019 Utils.hpp:137] Warning: Environment variable "
                "TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated; use TORCH_FR_BUFFER_SIZE instead (function operator())"}


def test_failure_feedback_leads_with_the_cause_without_harness_frames_or_paths():
    text = prompt.feedback(DEADLOCK, 1, "", "cpu", rounds=2)
    lines = text.splitlines()
    assert lines[2].startswith("Failed: runtime_error. rank 0: size tiny, trial 0: RuntimeError: Timed out waiting")
    assert 'File "solution.py", line 7, in solution' in text and "dist.recv(buf, 1)" in text
    assert 'File "torch/distributed/distributed_c10d.py"' in text
    for gone in ("pytest_kernelbench", "/jobs/", "/tmp/", "TORCH_NCCL_TRACE_BUFFER_SIZE", "unbound_buffer.cc",
                 "^^^", "Last lines of the job's log"):
        assert gone not in text, gone
    assert "What the other ranks reported (most likely a consequence):" in text


def test_deadlock_leads_with_the_rank_that_stopped_not_the_peer_that_lost_it():
    rec = {"outcome": "failed", "failure": "timeout",
           "message": "timeout: rank 1: size small, trial 0, candidate call: DistBackendError: store->get('0') got "
                      "error: Connection closed by peer [127.0.0.1]:41213 GLHF (its peers timed out waiting for it: "
                      'rank 0 stopped progressing in "size small, trial 0, candidate call", at solution.py line 24 '
                      "in solution(): spin())"}
    text = prompt.feedback(rec, 1)
    assert 'Failed: timeout. rank 0 stopped progressing in "size small, trial 0, candidate call"' in text
    assert text.index("stopped progressing") < text.index("GLHF")
    assert "What the rank reported that lost its peer (a consequence)" in text


def test_cut_off_answer_is_said_to_be_cut_off():
    rec = {"outcome": "failed", "failure": "compile_error", "llm": {"finish_reason": "length"},
           "message": "rank 0: importing the candidate: SyntaxError: '(' was never closed (solution.py, line 3)"}
    text = prompt.feedback(rec, 1, rounds=2)
    head = text.split("\n\n")[1]
    assert head.startswith("Your answer was cut off at the output token limit") and 'finish_reason "length"' in head
    assert "which is why it failed (compile_error)" in head and "shorter module" in text
    assert "cut off" not in prompt.feedback({**rec, "llm": {"finish_reason": "stop"}}, 1)


ON_PAR = {"outcome": "passed", "score": 0.99, "band": [0.97, 1.02], "verdict": "on_par", "sizes": [
    {"name": "small", "speedup": 0.99, "band": [0.97, 1.02], "roof_bound": "latency", "roof_s": 1.6e-5,
     "roofline": {"candidate": 0.43}, "timing": {"reference": {"median_s": 3.7e-5}, "candidate": {"median_s": 3.74e-5}}}]}


def test_on_par_is_neither_refined_nor_called_slower():
    assert not prompt.needs_refinement(ON_PAR, "cuda")
    text = feedback.speed_text(ON_PAR)
    assert "on par" in text and "slower" not in text and "band 0.97-1.02" in text
    measurably = {**ON_PAR, "score": 0.96, "band": [0.95, 0.97]}
    assert prompt.needs_refinement(measurably, "cuda") and "slower than the reference" in feedback.speed_text(measurably)
    assert prompt.needs_refinement({"outcome": "passed", "score": 0.7, "verdict": "degraded"}, "cuda")
    assert not prompt.needs_refinement({"outcome": "passed", "score": 0.7, "verdict": "degraded"}, "cpu")


def test_speed_feedback_names_each_sizes_bound_and_roofline_time():
    text = prompt.feedback({**ON_PAR, "score": 0.8, "band": [0.78, 0.82]}, 1)
    assert "size small: reference 37.0 us, yours 37.4 us: 0.99x (band 0.97-1.02)" in text
    assert "bound by latency (dependent messages), roofline 16.0 us (yours reaches 43% of it)" in text


def test_feedback_says_which_round_of_how_many():
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    chat = prompt.refine_messages(first, [("x = 1", DEADLOCK), ("x = 2", DEADLOCK)], rounds=3)
    one, two = chat[3]["content"], chat[5]["content"]
    assert "round 1 of 3" in one and "Write round 2" in one and "1 more round remains" in one
    assert "round 2 of 3" in two and "Write round 3" in two and "the last round" in two


def test_feedback_cleaning_keeps_candidate_frames_in_compile_errors():
    msg = ("rank 0: importing the candidate: SyntaxError: '(' was never closed (solution.py, line 3)\n"
           "    mod = load_module(self.job.candidate_path, \"kb_candidate\", register=True)\n"
           "          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
           '  File "/work/x/pytest_kernelbench/worker/files.py", line 74, in load_module\n'
           "    spec.loader.exec_module(module)\n"
           '  File "<frozen importlib._bootstrap_external>", line 936, in exec_module\n'
           '  File "/tmp/r/report/jobs/collective-syntax-054b0c/candidate/solution.py", line 3\n'
           "    return (x +\n           ^\nSyntaxError: '(' was never closed")
    assert re.sub(r"\s+", " ", feedback.clean(msg)) == re.sub(r"\s+", " ", (
        "rank 0: importing the candidate: SyntaxError: '(' was never closed (solution.py, line 3)\n"
        '  File "solution.py", line 3\n    return (x +\nSyntaxError: \'(\' was never closed'))


# ---- the committed samples ---------------------------------------------------------------------------
@pytest.mark.e2e
def test_prompt_samples_match_the_code(capsys):
    """docs/prompts/*.md are what the code renders; after a deliberate change:
    python bench/gen_prompt_samples.py (and review the diff)."""
    rc = gen_prompt_samples.main(["--check"])
    assert rc == 0, capsys.readouterr().out[-6000:]
    assert {p.name for p in (REPO / "docs/prompts").glob("*.md")} >= set(gen_prompt_samples.SAMPLES)
    assert Path(gen_prompt_samples.OUT) == REPO / "docs" / "prompts"


# ---- where the hardware facts come from --------------------------------------------------------------
def _cuda_h() -> Path | None:
    import shutil
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    for cand in (Path(nvcc).resolve().parent.parent / "include" / "cuda.h",
                 *sorted(Path("/usr/local").glob("cuda*/include/cuda.h"))):
        if cand.is_file():
            return cand
    return None


@pytest.mark.skipif(_cuda_h() is None, reason="no CUDA toolkit headers")
def test_device_attribute_numbers_are_cuda_hs():
    from pytest_kernelbench.spec import hardware
    names = {"cc_major": "COMPUTE_CAPABILITY_MAJOR", "cc_minor": "COMPUTE_CAPABILITY_MINOR",
             "sm_count": "MULTIPROCESSOR_COUNT", "l2_bytes": "L2_CACHE_SIZE",
             "smem_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", "smem_per_block": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
             "regs_per_sm": "MAX_REGISTERS_PER_MULTIPROCESSOR", "regs_per_block": "MAX_REGISTERS_PER_BLOCK",
             "clock_khz": "CLOCK_RATE"}
    header = _cuda_h().read_text()
    for key, name in names.items():
        m = re.search(rf"CU_DEVICE_ATTRIBUTE_{name}\s*=\s*(\d+)", header)
        assert m and int(m.group(1)) == hardware.DEVICE_ATTRIBUTES[key], key


@pytest.mark.skipif(_cuda_h() is None, reason="nvcc is not installed")
def test_toolchain_reads_the_nvcc_version():
    from pytest_kernelbench.spec import hardware
    assert re.fullmatch(r"\d+\.\d+\.\d+", hardware.toolchain()["nvcc"] or "")
