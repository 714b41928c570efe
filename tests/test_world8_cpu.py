"""No code assumes W <= 4: every problem valid at W = 8 runs its reference at W = 8 on CPU (gloo,
tiny size), checked against itself (structure, shapes, values, cost, inputs per rank).

All of them run in ONE job (world8_pool.py: 8 ranks forked once, one gloo process group, every
problem in turn), a few seconds in all; a fixed few of them (a collective, an ep and a p2p
problem, two of which build subgroups) also run through the real plugin (torchrun, worker,
report), which costs several seconds per item at 8 ranks on a small CI machine.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kbrun import PROBLEMS, REPO, by_problem, leftover_processes, make_tree, run

pytestmark = pytest.mark.e2e      # every test here runs an inner pytest or ranks (tests/e2e_guard.py)

HERE = Path(__file__).resolve().parent
POOL = HERE / "world8_pool.py"
WORLD = 8
VALID8 = sorted(p.parent.relative_to(PROBLEMS).as_posix() for p in PROBLEMS.glob("*/*/problem.yaml")
                if WORLD in yaml.safe_load(p.read_text())["world_sizes"])
# through the real plugin: one per category kind; moe_ep_dp_hybrid and pp_tp_handoff make
# dist.new_group subgroups whose layout depends on W (both valid at 4 and 8 only)
THROUGH_PLUGIN = ("collective/ulysses_seq_to_heads", "ep/moe_ep_dp_hybrid", "p2p/pp_tp_handoff")


def run_pool(out: Path, root: Path, problems: list[str], timeout: float = 300,
             world: int = WORLD) -> tuple[subprocess.CompletedProcess, dict, list[str]]:
    """(process, {problem: [record of each rank]}, [error report of each failed rank])."""
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    # its own session: on a timeout the whole group goes (the forked ranks too)
    proc = subprocess.Popen([sys.executable, str(POOL), str(out), str(world), str(root), *problems],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        stderr += f"\nworld8_pool.py: killed after {timeout:.0f} s"
    proc = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    results = out / "results.jsonl"
    records = {}
    if results.exists():
        for line in results.read_text().splitlines():
            doc = json.loads(line)
            records[doc["problem"]] = doc["ranks"]
    errors = [p.read_text() for p in sorted(out.glob("error-rank*.txt"))]
    return proc, records, errors


def test_every_problem_valid_at_8_runs_its_reference_at_8_ranks(tmp_path):
    assert len(VALID8) >= 10
    proc, records, errors = run_pool(tmp_path / "pool", PROBLEMS, VALID8)
    # the failing rank's own error first; its peers then only report a closed connection
    errors.sort(key=lambda e: "gloo/transport" in e.splitlines()[0])
    assert proc.returncode == 0 and not errors, "\n".join(
        [f"exit status {proc.returncode}; {len(records)} of {len(VALID8)} problems done"]
        + [e.splitlines()[0] for e in errors] + errors[:1] + [proc.stderr[-3000:]])
    problems = []
    for pid in VALID8:
        ranks = records.get(pid)
        if ranks is None:
            problems.append(f"{pid}: no record")
            continue
        assert [r["rank"] for r in ranks] == list(range(WORLD))
        for r in ranks:
            if r["mismatch"]:
                problems.append(f"{pid}: rank {r['rank']}: second run differs from the first: {r['mismatch']}")
            if r["not_finite"]:
                problems.append(f"{pid}: rank {r['rank']}: {r['not_finite']} is not finite")
            if r["leaves"] == 0:
                problems.append(f"{pid}: rank {r['rank']}: the reference returned nothing")
            zero = [size for size, v in r["link_bytes"].items() if not v > 0]
            if zero:
                problems.append(f"{pid}: cost() at W={WORLD} gives link_bytes <= 0 for sizes {zero}")
        if len({r["inputs"] for r in ranks}) != WORLD:
            problems.append(f"{pid}: inputs() gives the same inputs on some ranks")
    assert not problems, "\n".join(problems)


def test_a_broken_reference_at_8_is_reported_and_leaves_no_process(tmp_path):
    """The pool is not vacuous: a reference that assumes W <= 4 fails, naming problem and rank,
    after the problems before it got their records; no rank is left behind."""
    root, _ = make_tree(tmp_path, {"all_reduce": "", "w4_only": ""})   # copies of all_reduce
    ref = root / "collective" / "w4_only" / "reference.py"
    ref.write_text(ref.read_text().replace("def solution(", "def _solution(", 1) + """

def solution(*args):
    if dist.get_rank() >= 4:
        raise RuntimeError("rank beyond 4")
    return _solution(*args)
""")
    proc, records, errors = run_pool(tmp_path / "pool", root, ["collective/all_reduce", "collective/w4_only"], timeout=120)
    assert proc.returncode != 0
    assert set(records) == {"collective/all_reduce"}
    assert any("collective/w4_only" in e and "rank beyond 4" in e for e in errors), errors
    assert not leftover_processes(str(tmp_path))


def test_a_few_problems_at_8_ranks_through_the_plugin(tmp_path):
    assert set(THROUGH_PLUGIN) <= set(VALID8)
    proc, doc = run(tmp_path, str(REPO / "problems"), "-k", " or ".join(p.split("/")[1] for p in THROUGH_PLUGIN), "--kb-nproc=8",
                    "--kb-cpu-ranks=8", "--kb-candidate=reference", "--kb-timing=off", "--kb-trials=1", timeout=600)
    assert doc is not None, proc.stdout + proc.stderr
    items = by_problem(doc)
    assert sorted(items) == sorted(THROUGH_PLUGIN), sorted(items)
    for pid, it in items.items():
        assert it["outcome"] == "passed" and it["world_size"] == WORLD, (pid, it.get("failure"), it.get("message"))
        assert all(s["cost"]["link_bytes"] > 0 for s in it["sizes"])
    assert doc["aggregates"]["pass_x_gm"] is None          # no timing, no score: not a fake 0
