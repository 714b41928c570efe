"""The red team's one run: every candidate of the test_cheat_*.py files collected in this session
(each file's CHEATS, and SIZED_CHEATS on a tree with a second small size), beside an honest control,
is judged by ONE run of the real plugin (2 ranks, gloo, forbid enforced as on CUDA), and each file's
tests read their items from it. Under xdist the first worker to need it runs it and the others read
its result (a file lock in the session's shared temporary folder), so the files may land on any
worker and the run still happens once."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cheatlib import HONEST, tree_digest
from filelock import FileLock
from kbrun import by_problem, make_tree, run

TIMEOUT_S = 40
CONTROL = {
    "honest_p2p": HONEST + """
def solution(x):
    return _p2p_sum(x)
""",
}
# a second small size, so that a candidate written for one shape meets another
SIZES_PATCH = {"sizes": {"tiny": {"n": 4096}, "tiny2": {"n": 8192}, "small": {"n": 524288}}}


def _candidates(session: pytest.Session) -> tuple[dict[str, str], dict[str, str]]:
    cheats, sized = dict(CONTROL), {}
    modules = {it.module for it in session.items
               if isinstance(it, pytest.Function) and Path(str(it.fspath)).name.startswith("test_cheat_")}
    for mod in sorted(modules, key=lambda m: m.__name__):
        cheats.update(getattr(mod, "CHEATS", {}))
        sized.update(getattr(mod, "SIZED_CHEATS", {}))
    return cheats, sized


def _judge(root: Path, cheats: dict[str, str], sized: dict[str, str]) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    problems, solutions = make_tree(root, cheats)
    if sized:
        make_tree(root, sized, yaml_patch=SIZES_PATCH)
    before = tree_digest(problems)
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "-n", "2",
                    "--kb-keep-jobs", "--kb-sizes=tiny,tiny2" if sized else "--kb-sizes=tiny",
                    f"--kb-timeout={TIMEOUT_S}", "--kb-pg-timeout=10", timeout=900)
    assert doc is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    return {"items": by_problem(doc), "root": str(root), "problems": str(problems), "before": before,
            "candidates": sorted({**cheats, **sized})}


@pytest.fixture(scope="session")
def judged(request, tmp_path_factory) -> dict:
    cheats, sized = _candidates(request.session)
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        data = _judge(tmp_path_factory.mktemp("cheats"), cheats, sized)
    else:
        shared = tmp_path_factory.getbasetemp().parent      # the same folder for every worker
        with FileLock(str(shared / "cheats.lock")):
            done = shared / "cheats" / "judged.json"
            if not done.exists():
                result = _judge(shared / "cheats", cheats, sized)
                done.write_text(json.dumps(result))
            data = json.loads(done.read_text())
    return {**data, "root": Path(data["root"]), "problems": Path(data["problems"])}
