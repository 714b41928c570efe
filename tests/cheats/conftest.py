"""The red team's one run: every candidate of the test_cheat_*.py files collected in this session
(each file's CHEATS, and SIZED_CHEATS on a tree with a second small size), beside an honest control,
and every Tree of a file's TREES (candidates that need another base problem, deadline or dev knob),
is judged by ONE run of the real plugin (2 ranks, gloo, forbid enforced as on CUDA), and each file's
tests read their items from it. Under xdist the first worker to need it runs it and the others read
its result (a file lock in the session's shared temporary folder), so the files may land on any
worker and the run still happens once."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cheatlib import HONEST, Tree, tree_digest
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

# the generated tree's conftest: a Tree's environment is in the worker's while its items run, and a
# job's ranks take the worker's environment when they start (launch/env.py job_env)
ITEM_ENV = '''import json
import os
from pathlib import Path

import pytest

ENV = {env!r}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    here = Path(__file__).parent
    name = Path(item.path).parent.relative_to(here).as_posix()
    env = ENV.get(name, {{}})
    saved = {{k: os.environ.get(k) for k in env}}
    os.environ.update(env)
    if env:     # what the item's job started with, beside the tree (test_cheat_run.py reads it)
        seen = here.parent / "knobs"
        seen.mkdir(exist_ok=True)
        (seen / (name.replace("/", "__") + ".json")).write_text(json.dumps({{k: os.environ.get(k) for k in env}}))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
'''


def _candidates(session: pytest.Session) -> tuple[dict[str, str], dict[str, str], list[Tree]]:
    cheats, sized, trees = dict(CONTROL), {}, []
    here = Path(__file__).parent
    modules = {it.module for it in session.items
               if isinstance(it, pytest.Function) and Path(str(it.fspath)).parent == here}
    for mod in sorted(modules, key=lambda m: m.__name__):
        if Path(str(mod.__file__)).name.startswith("test_cheat_"):
            cheats.update(getattr(mod, "CHEATS", {}))
            sized.update(getattr(mod, "SIZED_CHEATS", {}))
        trees.extend(getattr(mod, "TREES", []))
    return cheats, sized, trees


def _judge(root: Path, cheats: dict[str, str], sized: dict[str, str], trees: list[Tree]) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    # the deadline is each tree's own (problem.yaml timeout_s; --kb-timeout would override every one)
    problems, solutions = make_tree(root, cheats, yaml_patch={"timeout_s": TIMEOUT_S})
    if sized:
        make_tree(root, sized, yaml_patch={**SIZES_PATCH, "timeout_s": TIMEOUT_S})
    ids = [f"collective/{n}" for n in {**cheats, **sized}]
    env = {}
    for tree in trees:
        make_tree(root, tree.candidates, base=tree.base, yaml_patch={"timeout_s": tree.timeout_s or TIMEOUT_S})
        category = tree.base.split("/")[0]
        for name in tree.candidates:
            ids.append(f"{category}/{name}")
            if tree.env:
                env[f"{category}/{name}"] = dict(tree.env)
    assert len(ids) == len(set(ids)), "two test files name a candidate alike"
    (problems / "conftest.py").write_text(ITEM_ENV.format(env=env))
    before = tree_digest(problems)
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "-n", "2",
                    "--kb-keep-jobs", "--kb-sizes=tiny,tiny2" if sized else "--kb-sizes=tiny",
                    "--kb-pg-timeout=10", timeout=900)
    assert doc is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    return {"items": by_problem(doc), "root": str(root), "problems": str(problems), "before": before,
            "candidates": sorted(ids), "knobs": env}


@pytest.fixture(scope="session")
def judged(request, tmp_path_factory) -> dict:
    cheats, sized, trees = _candidates(request.session)
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        data = _judge(tmp_path_factory.mktemp("cheats"), cheats, sized, trees)
    else:
        shared = tmp_path_factory.getbasetemp().parent      # the same folder for every worker
        with FileLock(str(shared / "cheats.lock")):
            done = shared / "cheats" / "judged.json"
            if not done.exists():
                result = _judge(shared / "cheats", cheats, sized, trees)
                done.write_text(json.dumps(result))
            data = json.loads(done.read_text())
    return {**data, "root": Path(data["root"]), "problems": Path(data["problems"])}
