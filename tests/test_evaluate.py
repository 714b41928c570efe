"""evaluate() and evaluate_many() (pytest_kernelbench/scoring): one candidate scored without pytest
gives the same verdict, category and disposition as the pytest item for the same candidate (the
same KBSession.run_item underneath), for an honest candidate, a wrong one, one that deadlocks, one
that calls a forbidden collective, a red-team cheat and one that does not parse. The pytest run and
the batch run on the same throwaway tree of all_reduce copies (tests/kbrun.py), 2 ranks on gloo."""
from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kbrun import FIRST_CALL_RECV, RING, by_problem, leftover_processes, make_tree, run

from pytest_kernelbench.protocol import Disposition, Failure, Outcome

sys.path.insert(0, str(Path(__file__).parent / "cheats"))     # the red team's candidates, as they are
from test_cheat_patching import CHEATS  # noqa: E402

CANDIDATES = {
    "honest": RING,
    "wrong": "def solution(x):\n    return x.clone()\n",
    "deadlock": FIRST_CALL_RECV,
    "forbidden": "import torch.distributed as dist\n\ndef solution(x):\n    y = x.clone()\n    dist.all_reduce(y)\n"
                 "    return y\n",
    "cheat_dispatch_mode": CHEATS["global_dispatch_mode"],
    "syntax": "def solution(x)\n    return x\n",
}
EXPECTED = {"honest": ("passed", None), "wrong": ("failed", "mismatch"), "deadlock": ("failed", "timeout"),
            "forbidden": ("failed", "forbidden_call"), "cheat_dispatch_mode": ("failed", "forbidden_call"),
            "syntax": ("failed", "compile_error")}
OPTIONS = {"world_size": 2, "sizes": ["tiny"], "timing": False, "pg_timeout": 10, "timeout": 60}
PYTEST_OPTIONS = ("--kb-nproc=2", "--kb-sizes=tiny", "--kb-timing=off", "--kb-pg-timeout=10", "--kb-timeout=60")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate")
    problems, solutions = make_tree(root, CANDIDATES)
    return root, problems, solutions


@pytest.fixture(scope="module")
def by_pytest(tree):
    """The pytest run, started in the background: the batch beside it waits out the same deadlock
    meanwhile. Call it for the items."""
    root, problems, solutions = tree
    pool = ThreadPoolExecutor(1)
    started = pool.submit(run, root, str(problems), f"--kb-solutions={solutions}", "-n", "2", *PYTEST_OPTIONS,
                          timeout=600)

    def items() -> dict:
        proc, doc = started.result()
        assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
        return by_problem(doc)
    yield items
    pool.shutdown()


@pytest.mark.e2e
def test_a_batch_gives_the_pytest_items_verdicts(tree, by_pytest):
    from pytest_kernelbench import evaluate_many
    root, problems, _ = tree
    requests = [{"id": name, "problem": f"collective/{name}", "code": code} for name, code in CANDIDATES.items()]
    t0 = time.monotonic()
    got = {}
    for ev in evaluate_many(requests, workers=2, problems_dir=problems, reward="kevin", **OPTIONS):
        got[ev.id] = ev
        got[ev.id + "@"] = time.monotonic() - t0     # streamed: each as it finishes
    assert set(CANDIDATES) <= set(got)
    items = by_pytest()
    for name in CANDIDATES:
        ev, item = got[name], items[f"collective/{name}"]
        assert (ev.record.outcome, ev.record.failure) == EXPECTED[name], (name, ev.record.message)
        assert (ev.record.outcome, ev.record.failure) == (item["outcome"], item.get("failure")), (name, item["message"])
        assert ev.record.to_dict()["disposition"] == item["disposition"] == Disposition.VALID
        assert ev.feedback and ev.reward["preset"] == "kevin"
        if name != "honest":
            assert f"Failed: {ev.record.failure}." in ev.feedback, ev.feedback
    # the deadlocked one ends last, and the others did not wait for it
    assert got["deadlock@"] >= max(got[f"{n}@"] for n in ("honest", "wrong", "syntax"))
    assert got["honest"].reward["value"] == pytest.approx(0.3)       # CPU: correct, speed not measured
    assert got["cheat_dispatch_mode"].reward["value"] == -1.0
    assert got["wrong"].components["correct"] is False
    assert not leftover_processes(str(root))


@pytest.mark.e2e
def test_evaluate_in_process_matches_the_item(tree, by_pytest):
    from pytest_kernelbench import evaluate
    _, problems, _ = tree
    for name in ("honest", "forbidden"):
        ev = evaluate(f"collective/{name}", CANDIDATES[name], problems_dir=problems, **OPTIONS)
        item = by_pytest()[f"collective/{name}"]
        assert (ev.record.outcome, ev.record.failure) == (item["outcome"], item.get("failure")), ev.record.message
        assert ev.disposition == Disposition.VALID


@pytest.mark.e2e
def test_a_deadline_met_while_queued_is_retryable_not_a_zero(tree):
    from pytest_kernelbench.scoring import Evaluator
    _, problems, _ = tree
    evaluator = Evaluator(problems)
    try:
        ev = evaluator.evaluate("collective/honest", RING, {**OPTIONS, "deadline": 5}, submitted=time.time() - 10)
    finally:
        evaluator.close()
    assert (ev.record.outcome, ev.record.failure) == (Outcome.ERROR, Failure.HARNESS_ERROR)
    assert "deadline met while queued" in ev.record.message
    assert ev.disposition == Disposition.RETRYABLE
    assert ev.to_dict()["components"]["correct"] is None


def test_bad_requests_are_refused_before_anything_runs():
    from pytest_kernelbench.scoring import Evaluator, EvaluateError, UnknownProblem
    from pytest_kernelbench.scoring.evaluate import find_problem, settings_for
    with pytest.raises(UnknownProblem):
        find_problem("collective/no_such_problem")
    with pytest.raises(UnknownProblem):
        find_problem("../../etc")
    with pytest.raises(EvaluateError, match="unknown option"):
        settings_for({"allow_multicast": True})       # never through the API
    with pytest.raises(EvaluateError, match="trials"):
        settings_for({"trials": 0})
    with pytest.raises(EvaluateError, match="timing"):
        settings_for({"timing": "sometimes"})
    s, own = settings_for({"world_size": 2, "sizes": ["tiny"], "timing": False, "deadline": 30})
    assert (s.nproc, s.sizes, s.timing, own["deadline"]) == (2, ["tiny"], False, 30.0)
    # ranks sharing a GPU (a cheap correctness signal): the pytest option, checked by its own row
    assert settings_for({"oversubscribe": True})[0].oversubscribe is True
    with pytest.raises(EvaluateError, match="oversubscribe"):
        settings_for({"oversubscribe": "sometimes"})
    evaluator = Evaluator()
    with pytest.raises(UnknownProblem):
        evaluator.evaluate("nope/nope", "def solution(x): return x")
    evaluator.close()
    assert not evaluator.workdir.exists()          # its scratch folder goes with it


@pytest.mark.e2e
def test_kernelbench_prompt_and_try_the_agent_tools(tree, tmp_path):
    """`kernelbench prompt PROBLEM` prints the task a model sees; `kernelbench try PROBLEM FILE` runs
    one evaluation and prints the feedback (exit 1 when it did not pass)."""
    import subprocess

    from kbrun import inner_env
    _, problems, _ = tree
    cli = [sys.executable, "-m", "pytest_kernelbench.cli"]
    proc = subprocess.run([*cli, "prompt", "collective/wrong", "--problems", str(problems), "--world-size", "2",
                           "--device", "cpu"], cwd=tmp_path, env=inner_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "<!-- system -->" in proc.stdout and "<!-- user -->" in proc.stdout and "def solution(" in proc.stdout
    assert "harness.py" not in proc.stdout
    (tmp_path / "solution.py").write_text(CANDIDATES["wrong"])
    proc = subprocess.run([*cli, "try", "collective/wrong", "solution.py", "--problems", str(problems),
                           "--world-size", "2", "--sizes", "tiny", "--timing", "off"],
                          cwd=tmp_path, env=inner_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("collective/wrong: failed (mismatch), disposition valid"), proc.stdout
    assert "Failed: mismatch." in proc.stdout and "## Result of your round 1" in proc.stdout
    proc = subprocess.run([*cli, "try", "collective/no_such", "solution.py", "--problems", str(problems)],
                          cwd=tmp_path, env=inner_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "unknown problem" in proc.stderr, proc.stderr


@pytest.mark.e2e
def test_pkb_problems_through_evaluate_many(tmp_path):
    """ParallelKernelBench problems (pkb=CHECKOUT, ids pkb/<N>_<name>) through a batch: the verdicts
    tests/test_pkb.py asserts for the same candidates as pytest items; a reference that does not
    load is invalid_problem, retryable."""
    from pkb_fixture import CANDIDATES as PKB_CANDIDATES
    from pkb_fixture import make_checkout

    from pytest_kernelbench import evaluate_many
    pkb = make_checkout(tmp_path / "pkb")
    expected = {"1_allreduce": ("passed", None), "5_scatter": ("failed", "unsafe"),
                "7_reducescatter": ("failed", "forbidden_call"), "4_reduce": ("error", "invalid_problem")}
    reqs = [{"id": stem, "problem": f"pkb/{stem}", "code": PKB_CANDIDATES.get(stem, "def solution(x): return x")}
            for stem in expected]
    got = {ev.id: ev for ev in evaluate_many(reqs, workers=2, pkb=str(pkb), world_size=2, timeout=20)}
    assert {k: (ev.record.outcome, ev.record.failure) for k, ev in got.items()} == expected, \
        {k: ev.record.message for k, ev in got.items()}
    assert got["4_reduce"].disposition == Disposition.RETRYABLE and got["1_allreduce"].disposition == Disposition.VALID
