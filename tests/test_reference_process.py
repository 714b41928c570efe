"""The reference process is the candidate process's twin for timing, not a suspect: it runs none of
the guards of the candidate's forbidden APIs. Those wrap every collective a reference makes (a
Python wrapper on the function and another on the process group's method, each counting while a
window runs), so the reference paid for them in every timed call while an honest candidate, which
never calls them, paid nothing: its speedup came out higher than it was."""
from __future__ import annotations

import pytest
from kbrun import by_problem, explain, make_tree, run

pytestmark = pytest.mark.e2e

REFERENCE = '''
import torch
import torch.distributed as dist


def _wrapped():
    found = []
    if "guards" in dist.all_reduce.__code__.co_filename:
        found.append("torch.distributed.all_reduce")
    if getattr(type(dist.group.WORLD).allreduce, "_kb_wrapped", False):
        found.append("ProcessGroup.allreduce")
    return found


def solution(x):
    found = _wrapped()
    if found:
        raise RuntimeError("the reference's collectives are wrapped: " + ", ".join(found))
    scratch = torch.zeros(1, dtype=x.dtype, device=x.device)
    dist.all_reduce(scratch)          # a forbidden collective, as references make them
    return x * 2
'''

CANDIDATE = '''
def solution(x):
    return x * 2
'''


def test_the_reference_process_runs_its_collectives_unwrapped(tmp_path):
    problems, solutions = make_tree(tmp_path, {"doubled": CANDIDATE}, yaml_patch={"forbid": ["collectives"]})
    (problems / "collective" / "doubled" / "reference.py").write_text(REFERENCE)
    proc, doc = run(tmp_path, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-sizes=tiny",
                    timeout=300)
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    it = by_problem(doc)["collective/doubled"]
    assert it["outcome"] == "passed", explain(it)
    timing = it["sizes"][0]["timing"]
    assert timing["window_us"]["reference"], "timed through the reference process"
    # a window's parts on the checker's clock too: where the harness's own time per window goes
    for side in ("reference", "candidate"):
        parts = timing["window_us"][side]
        assert {"wake", "close", "read"} <= set(parts) and all(parts[k] >= 0 for k in ("wake", "close", "read")), parts
    assert 0 < timing["refill_make_s"] <= timing["spent_s"]["refill"], timing
