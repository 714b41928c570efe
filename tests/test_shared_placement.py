"""The shared-device placement (--kb-oversubscribe, docs/one-gpu.md): which items run with their W
ranks on fewer GPUs, which skip and why, what the job tells the ranks (gloo, the GPU of each rank,
the overlapping-devices switch, timing off), and that such a record never enters a speed figure, a
comparison of speed or a leaderboard row of timed runs. CPU jobs have no devices, so the placement
is decided here with a fake GPU count (as tests/test_gpus.py fakes the pool) and the record rules
are checked on synthetic records (tests/cli_synth.py)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import cli_synth as synth
import pytest
from kbrun import REPO

from pytest_kernelbench import metrics, report
from pytest_kernelbench.cli import leaderboard
from pytest_kernelbench.launch.env import job_env
from pytest_kernelbench.options import Settings
from pytest_kernelbench.outcome import LaunchOutcome
from pytest_kernelbench.protocol import MULTICAST_OFF, SHARED_ENV, SHARED_NO_SPEED, JobSpec, Outcome
from pytest_kernelbench.report import diff as compare
from pytest_kernelbench.report import reading as reports
from pytest_kernelbench.report.record import ItemRecord
from pytest_kernelbench.session import KBSession, Skip
from pytest_kernelbench.spec import shared, shared_docs
from pytest_kernelbench.spec.problem import Placement, ProblemError, load_problem

PROBLEMS = REPO / "problems"


def _problem(pid: str, **patch):
    p = load_problem(PROBLEMS / pid / "problem.yaml", PROBLEMS)
    return dataclasses.replace(p, **patch) if patch else p


def _session(gpus: int, local_gpus: bool = True, **settings) -> SimpleNamespace:
    """What KBSession.place, job and fill read of a session, on a machine with `gpus` fake GPUs."""
    ns = SimpleNamespace(settings=Settings(**settings), gpu_count=gpus, machine={"ceilings": {"link_bw": 4.5e11}},
                         launcher=SimpleNamespace(local_gpus=local_gpus, name="fork" if local_gpus else "slurm"))
    ns.shared_skip = lambda problem: KBSession.shared_skip(ns, problem)       # type: ignore[arg-type]
    ns.gpus_for = lambda placement: KBSession.gpus_for(ns, placement)         # type: ignore[arg-type]
    ns.baselines_of = lambda problem, placement: KBSession.baselines_of(ns, problem, placement)  # type: ignore[arg-type]
    return ns


def _place(pid: str, gpus: int, **settings) -> Placement:
    return KBSession.place(_session(gpus, **settings), _problem(pid))        # type: ignore[arg-type]


# ---- which items run, where, and which skip -------------------------------------------------------
def test_without_the_option_nothing_shares_and_the_skip_names_it():
    with pytest.raises(Skip, match=r"needs 2 CUDA GPUs, found 1 \(--kb-oversubscribe checks it on fewer GPUs"):
        _place("collective/all_reduce", gpus=1)
    with pytest.raises(Skip, match=r"needs 4 CUDA GPUs, found 1 \(--kb-oversubscribe"):
        _place("collective/all_reduce", gpus=1, nproc=4)
    # no GPU at all: the CUDA-only problem skips as before, with no hint (nothing to share)
    with pytest.raises(Skip, match=r"^needs CUDA GPUs, found 0") as e:
        _place("collective/ipc_one_shot_allreduce", gpus=0, oversubscribe=True)
    assert "oversubscribe" not in str(e.value)


@pytest.mark.parametrize("gpus,nproc,world,shared_", [
    (1, 2, 2, True), (1, 4, 4, True), (2, 4, 4, True),
    (1, None, 2, True),         # no --kb-nproc: the smallest valid world size, shared
    (4, 2, 2, False), (4, None, 4, False), (8, None, 8, False),   # it fits: one GPU per rank, timed as ever
])
def test_the_option_shares_only_what_does_not_fit(gpus, nproc, world, shared_):
    p = _place("collective/all_reduce", gpus=gpus, nproc=nproc, oversubscribe=True)
    assert (p.device, p.world_size, p.shared) == ("cuda", world, shared_)


def test_a_problem_that_needs_what_sharing_cannot_give_skips_before_launch_with_why():
    with pytest.raises(Skip, match=r"cannot run with ranks sharing a GPU: needs NCCL, which refuses two ranks on one "
                                   r"GPU .*NCCL's device API"):
        _place("collective/nccl_device_allreduce", gpus=1, nproc=2, oversubscribe=True)
    # CUDA point-to-point is staged through the host there (rank/p2pstage.py): it runs
    assert _place("p2p/ring_send_recv", gpus=1, nproc=2, oversubscribe=True).shared
    with pytest.raises(Skip, match=r"needs distinct GPUs .*: copy engines moving data between two GPUs"):
        _place("p2p/peer_copy_engine_vs_sm", gpus=1, nproc=2, oversubscribe=True)
    # the same problems on GPUs of their own: the declaration does not matter there
    assert not _place("collective/nccl_device_allreduce", gpus=2, nproc=2, oversubscribe=True).shared
    # on CPU (gloo) the placement changes nothing: the rules are a shared GPU's only
    assert _place("p2p/ring_send_recv", gpus=0, device="cpu").device == "cpu"


def test_a_launcher_whose_scheduler_gives_the_gpus_does_not_share():
    ns = _session(1, local_gpus=False, nproc=2, oversubscribe=True)
    with pytest.raises(Skip, match=r"--kb-oversubscribe shares this machine's GPUs; the slurm launcher"):
        KBSession.place(ns, _problem("collective/all_reduce"))          # type: ignore[arg-type]


def test_a_candidate_that_calls_nccl_itself_skips_and_the_shipped_code_does_not():
    for src in ("import torch\ntorch.cuda.nccl.all_reduce([x])", "g = dist.new_group(ranks, backend='nccl')",
                "ncclCommInitRank(&comm, w, id, r);", '#include <nccl.h>\n', "from pynccl import Comm",
                "dist.init_process_group('nccl')"):
        why = shared.candidate_skip(src)
        assert why and why.startswith("cannot run with ranks sharing a GPU: the candidate calls NCCL itself"), src
    assert shared.candidate_skip("torch.cuda.nccl.version()\n").endswith('("Duplicate GPU detected")')
    assert "at line 2" in shared.candidate_skip("x = 1\ntorch.cuda.nccl.reduce(t)")
    # every reference and shipped solution of a problem that runs shared: never mistaken for NCCL's
    # caller (their comments may name NCCL: "NCCL picks its own algorithm")
    for y in sorted(PROBLEMS.glob("*/*/problem.yaml")):
        p = load_problem(y, PROBLEMS)
        if "cuda" not in p.devices or p.shared_device:
            continue
        for f in [p.reference_path, *(s["path"] for s in p.solutions.values())]:
            assert shared.candidate_skip(f.read_text()) is None, f


def test_run_item_skips_a_candidate_calling_nccl_before_any_launch(tmp_path):
    from pytest_kernelbench.candidates import Candidate
    ns = _session(1, nproc=2, oversubscribe=True)
    ns.settings = dataclasses.replace(ns.settings, allow_multicast=False)
    problem = _problem("collective/all_reduce")
    placement = KBSession.place(ns, problem)                                  # type: ignore[arg-type]
    cand = Candidate(kind="file", label="mine", source="import torch\ndef solution(x):\n"
                     "    torch.cuda.nccl.all_reduce([x])\n    return x\n", origin="mine.py")
    ns.launcher = None          # a launch would fail on it: the skip comes first
    rec = KBSession.run_item(ns, problem, cand, placement, "node")          # type: ignore[arg-type]
    assert rec.outcome == Outcome.SKIPPED and rec.failure is None and rec.placement == "shared"
    assert "calls NCCL itself" in rec.message


# ---- what the job tells the ranks ----------------------------------------------------------------
def test_the_job_of_a_shared_item_is_untimed_over_gloo_and_spreads_ranks_over_the_gpus(tmp_path):
    from pytest_kernelbench.candidates import Candidate
    problem = _problem("collective/all_reduce")
    cand = Candidate(kind="reference", label="self-check", source=problem.reference_path.read_text(), origin="")
    for gpus, nproc, spread in ((1, 4, [0, 0, 0, 0]), (2, 4, [0, 1, 0, 1])):
        ns = _session(gpus, nproc=nproc, oversubscribe=True)
        placement = KBSession.place(ns, problem)                              # type: ignore[arg-type]
        job = KBSession.job(ns, problem, cand, placement, tmp_path / f"j{gpus}")   # type: ignore[arg-type]
        assert job.shared_gpus == gpus and job.backend == "gloo" and job.timing.enabled is False
        assert [job.gpu_of(r) for r in range(nproc)] == spread
        assert KBSession.gpus_for(ns, placement) == gpus        # the lease: every GPU there is, up to W
        back = JobSpec.read(_write(job, tmp_path / f"job{gpus}.json"))
        assert (back.shared_gpus, back.backend) == (gpus, "gloo")
    ns = _session(4, nproc=2, oversubscribe=True)        # fits: NCCL, timed, a GPU per rank
    placement = KBSession.place(ns, problem)                                  # type: ignore[arg-type]
    job = KBSession.job(ns, problem, cand, placement, tmp_path / "j4")        # type: ignore[arg-type]
    assert (job.shared_gpus, job.backend, job.timing.enabled, job.gpu_of(1)) == (0, "nccl", True, 1)
    assert JobSpec(**{**_min_spec(), "device": "cpu"}).backend == "gloo"


def _min_spec() -> dict:
    return dict(token="t", problem="p", harness_path="h", reference_path="r", candidate_path="c", problem_dir="d",
                device="cuda", dtype="float32", sizes={}, size_order=[])


def _write(job: JobSpec, path: Path) -> Path:
    job.write(path)
    return path


def test_every_process_of_a_shared_job_gets_the_overlap_switch_and_multicast_stays_off():
    env = job_env("tok", [0], None, shared=True)
    assert all(env[k] == v for k, v in SHARED_ENV.items())
    assert all(env[k] == v for k, v in MULTICAST_OFF.items())      # never touched
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert not set(SHARED_ENV) & set(job_env("tok", [0, 1], None))     # a job of its own GPUs: not set


# ---- the record: no speed, and why ---------------------------------------------------------------
def test_fill_gives_a_shared_record_no_speed_band_verdict_or_roofline():
    ns = _session(1, nproc=2, oversubscribe=True)
    placement = Placement("cuda", 2, ["small"], shared=True)
    # even sizes that came back with a speedup (a forged or future result) give no speed
    sizes = synth.sizes([1.5])
    rec = ItemRecord("n", "collective/all_reduce")
    KBSession.fill(ns, rec, LaunchOutcome(Outcome.PASSED, result={"sizes": sizes}), placement)   # type: ignore[arg-type]
    d = rec.to_dict()
    assert d["speed"] == SHARED_NO_SPEED and d["score"] is None and d["verdict"] is None
    assert d.get("band") is None and d["roofline"]["candidate"] is None and not d["suspect"]
    assert all(s["speedup"] is None for s in d["sizes"])


# ---- aggregates, table, leaderboard, compare -----------------------------------------------------
def test_a_shared_record_never_enters_a_speed_aggregate():
    timed = [synth.record("collective/all_reduce", "passed", [2.0]), synth.record("p2p/ring_exchange", "passed", [0.5])]
    alone = metrics.aggregate(timed)
    # a shared record (even with a score forged onto it) passes for correctness and moves no speed figure
    mixed = metrics.aggregate(timed + [synth.shared("fusion/matmul_reduce_scatter", "passed", forged_score=9.0),
                                       synth.shared("ep/moe_dispatch", "failed", failure="mismatch")])
    for k in ("gm_speedup", "pass_x_gm", "pass_good", "fast_1", "fast_p", "tiers", "roofline_gm", "suspect"):
        assert mixed[k] == alone[k], k
    assert (mixed["passed"], mixed["total"], mixed["shared"], mixed["unscored"]) == (3, 4, 2, 0)
    assert mixed["family_weighted"]["gm_speedup"] == alone["family_weighted"]["gm_speedup"]
    only = metrics.aggregate([synth.shared("collective/all_reduce", "passed", forged_score=9.0)])
    assert only["pass_rate"] == 1.0 and only["gm_speedup"] is None and only["pass_x_gm"] is None
    assert only["fast_p"] == {str(p): None for p in metrics.FAST_P} and only["tiers"] == {}
    # samples: fast_1@k is a speed figure, never a shared sample's
    recs = [synth.shared("collective/all_reduce", "passed", forged_score=9.0, sample=k) for k in (0, 1)]
    assert metrics.aggregate(recs)["samples"] == {"pass@1": 1.0, "pass@2": 1.0}


def test_the_table_and_summary_say_shared_and_why(tmp_path):
    doc = json.loads(synth.shared_run(tmp_path).read_text())
    rows = report.table(doc["items"])
    row = next(r for r in rows if r.startswith("collective/all_reduce"))
    assert "cuda (shared)" in row and SHARED_NO_SPEED in row
    lines = report.summary_lines(doc)
    assert any(ln.startswith(f"speed: none ({SHARED_NO_SPEED}") for ln in lines), lines
    items = [synth.record("collective/all_reduce", "passed", [2.0]), synth.shared("p2p/ring_exchange", "passed")]
    mixed = report.summary_lines({"aggregates": metrics.aggregate(items), "items": items, "breakdowns": {}})
    assert any(ln.startswith("shared GPU: 1 item(s) ran with their ranks sharing GPUs") for ln in mixed), mixed


def test_the_leaderboard_keeps_a_shared_run_apart_and_says_so(tmp_path):
    timed = synth.auto_run(tmp_path, "timed.json", {"collective/all_reduce": "self-check",
                                                    "p2p/ring_exchange": "self-check"}, machine=synth.H100X1)
    doc = json.loads(timed.read_text())
    doc["config"]["settings"]["candidate"] = "reference"
    timed.write_text(json.dumps(doc))
    shared_ = synth.shared_run(tmp_path, forged_score=5.0)
    board = reports.board([timed, shared_])
    assert len(board.entries) == 2           # the same candidate on the same GPU: two rows, never one
    scores = {s.entry.machine: s for s in leaderboard.ranked(board.entries)}
    assert set(scores) == {"1x NVIDIA H100 80GB HBM3, W=4", "1x NVIDIA H100 80GB HBM3, W=2, shared GPU"}
    sh = scores["1x NVIDIA H100 80GB HBM3, W=2, shared GPU"]
    assert sh.no_speed == SHARED_NO_SPEED and sh.aggregates["pass_x_gm"] is None
    assert sh.aggregates["pass_rate"] == 1.0
    main = leaderboard.main_table(list(scores.values()))
    row = next(r for r in main.rows if r[2].endswith("shared GPU"))
    assert row[0] == "-" and row[5] == SHARED_NO_SPEED and "5.000x" not in " ".join(row)
    assert "shared GPU ran ranks sharing GPUs (--kb-oversubscribe)" in main.note
    # one report holding both: its row names how many shared, and its speed is the timed items' alone
    items = [synth.record("collective/all_reduce", "passed", [2.0]), synth.shared("p2p/ring_exchange", "passed",
                                                                                    forged_score=9.0)]
    mixed = synth.write(tmp_path / "mixed.json", items, synth.H100X1, {"candidate": "reference"})
    (entry,) = reports.board([mixed]).entries
    assert entry.machine == "1x NVIDIA H100 80GB HBM3, W=2/4, 1 of 2 on a shared GPU"
    assert leaderboard.score(entry).aggregates["gm_speedup"] == pytest.approx(2.0)


def test_compare_never_sets_a_shared_run_against_a_timed_one_on_speed(tmp_path):
    base = synth.auto_run(tmp_path, "base.json", {"collective/all_reduce": "self-check",
                                                  "p2p/ring_exchange": "self-check"}, machine=synth.H100X1)
    new = synth.shared_run(tmp_path, ring="failed", forged_score=0.2)    # a forged 0.2x: no regression
    cmp = compare.compare(reports.load(base), reports.load(new), compare.parse_fail_on("speedup:5%,pass"))
    changes = {d.problem: d.change for d in cmp.items}
    assert changes == {"collective/all_reduce": "no speed", "p2p/ring_exchange": "lost"}
    assert cmp.regressions == ["p2p/ring_exchange: passed -> failed:mismatch"]     # correctness still compares
    assert dict((k, n) for k, _, n in cmp.aggregates)["GM-speedup"] is None
    text = "\n".join(cmp.lines())
    assert "shared GPU: 2 item(s) ran with ranks sharing GPUs in BASE or NEW" in text and "REGRESSION" not in text


# ---- problem.yaml: shared_device -----------------------------------------------------------------
@pytest.mark.parametrize("value,message", [
    ("no", "field 'shared_device' must be a mapping"),
    ({"needs": []}, "field 'shared_device.needs' must be a non-empty list of nccl, distinct_devices"),
    ({"needs": ["mpi"], "why": "x"}, "field 'shared_device.needs' has 'mpi'; expected any of"),
    ({"needs": ["nccl"]}, "field 'shared_device.why' must be a sentence saying why"),
    ({"needs": ["nccl"], "why": "x", "because": 1}, "unknown field 'shared_device.because'"),
])
def test_a_bad_shared_device_is_a_collection_error_naming_the_file_and_field(tmp_path, value, message):
    import shutil

    import yaml
    folder = tmp_path / "problems" / "collective" / "all_reduce"
    shutil.copytree(PROBLEMS / "collective" / "all_reduce", folder)
    data = yaml.safe_load((folder / "problem.yaml").read_text())
    data["shared_device"] = value
    (folder / "problem.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ProblemError, match="problem.yaml: " + message.replace("(", r"\(")) as e:
        load_problem(folder / "problem.yaml", tmp_path / "problems")
    assert str(folder / "problem.yaml") in str(e.value)


def test_the_docs_classification_table_is_every_cuda_problem():
    page = (REPO / "docs" / "one-gpu.md").read_text()
    assert shared_docs.table_markdown(PROBLEMS) in page, "regenerate: python -m pytest_kernelbench.spec.shared_docs"


def test_the_bench_table_reads_each_run_and_names_skips(tmp_path, capsys):
    from bench import shared_table
    synth.shared_run(tmp_path, "shared-w2-reference.json")
    synth.shared_run(tmp_path, "shared-w2-shipped.json", ring="failed")
    cut = tmp_path / "shared-w4-reference.jsonl"      # a run cut short: its JSONL alone
    cut.write_text(json.dumps(synth.record("ep/moe_dispatch", "skipped", message="cannot run with ranks sharing a "
                                           "GPU: needs NCCL")) + "\n")
    shared_table.main(sorted(map(str, tmp_path.glob("shared-w*"))))
    out = capsys.readouterr().out
    assert "| problem | W=2 self-check | W=2 shipped | W=4 self-check |" in out
    assert "| p2p/ring_exchange | passed | failed:mismatch | not run |" in out
    assert "skip: cannot run with ranks sharing a GPU: needs NCCL" in out


def test_pkb_items_take_the_same_placement_and_their_needs_are_read_off_the_reference(tmp_path):
    from pkb_fixture import make_checkout

    from pytest_kernelbench.pkb.checkout import load_problems
    root = make_checkout(tmp_path / "pkb")
    loaded = dict(load_problems(root, tmp_path / "cache"))
    allreduce = loaded["1_allreduce"]
    assert allreduce.shared_device is None          # collectives: gloo serves them on a shared GPU
    ns = _session(1, nproc=2, oversubscribe=True)
    p = KBSession.place(ns, allreduce)                                         # type: ignore[arg-type]
    assert (p.device, p.world_size, p.shared) == ("cuda", 2, True)
    # point-to-point is served there (staged through the host), so only NCCL called itself skips
    assert shared.reference_needs("def solution(x):\n    dist.send(x, 1)\n") is None
    assert shared.reference_needs("ops = [dist.P2POp(dist.isend, x, 1)]") is None
    assert shared.reference_needs("torch.cuda.nccl.all_reduce([x])")["needs"] == ["nccl"]
    assert shared.reference_needs("dist.all_reduce(x)\ndist.all_to_all_single(y, x)") is None
    needs_nccl = dataclasses.replace(allreduce, shared_device=shared.reference_needs("torch.cuda.nccl.reduce([x])"))
    with pytest.raises(Skip, match=r"needs NCCL, which refuses two ranks on one GPU .*: its reference calls NCCL "
                                   r"itself \(torch\.cuda\.nccl\)"):
        KBSession.place(ns, needs_nccl)                                        # type: ignore[arg-type]


def test_a_models_prompt_says_the_ranks_share_gpus_over_gloo():
    from pytest_kernelbench.candidates import prompt
    problem = _problem("collective/all_reduce")
    machine = {"gpu_count": 1, "gpu_model": "NVIDIA H100 80GB HBM3", "ceilings": {}}
    text = prompt.task_text(problem, Placement("cuda", 2, ["small"], shared=True), machine, None)
    assert "ranks sharing GPUs (a correctness check; nothing is timed)" in text and "(backend `gloo`)" in text
    own = prompt.task_text(problem, Placement("cuda", 2, ["small"]), machine, None)
    assert "one GPU per rank" in own and "(backend `nccl`)" in own


@pytest.mark.e2e
def test_the_option_on_a_cpu_machine_changes_nothing_but_says_what_it_does(tmp_path):
    """The option (command line, and its ini twin) on CPU: gloo items run as ever, nothing is shared,
    and the header says what the option would do on GPUs."""
    from kbrun import make_tree, run
    problems, _ = make_tree(tmp_path, {"all_reduce": (PROBLEMS / "collective/all_reduce/reference.py").read_text()})
    (tmp_path / "pytest.ini").write_text("[pytest]\nkb_oversubscribe = true\n")
    for args in (["--kb-oversubscribe"], []):          # the flag, then the ini key alone
        for old in tmp_path.glob("report.json*"):
            old.unlink()
        proc, doc = run(tmp_path, str(problems), "--kb-device=cpu", "--kb-nproc=2", "--kb-candidate=reference", *args)
        assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "--kb-oversubscribe: a CUDA world size that does not fit runs with its ranks sharing GPUs" in proc.stdout
        (it,) = doc["items"]
        assert it["outcome"] == "passed" and it["device"] == "cpu" and "placement" not in it
        assert doc["config"]["settings"]["oversubscribe"] is True
