"""No code assumes W <= 4: every problem valid at W = 8 runs its reference at W = 8 on CPU (gloo,
tiny size) through the real plugin, checked against itself (structure, shapes, cost, result)."""
from __future__ import annotations

import yaml

from kbrun import PROBLEMS, REPO, by_problem, run


def test_every_problem_valid_at_8_runs_at_8_ranks(tmp_path):
    valid8 = sorted(p.parent.relative_to(PROBLEMS).as_posix() for p in PROBLEMS.glob("*/*/problem.yaml")
                    if 8 in yaml.safe_load(p.read_text())["world_sizes"])
    assert valid8
    proc, doc = run(tmp_path, str(REPO / "problems"), "--kb-nproc=8", "--kb-cpu-ranks=8", "--kb-candidate=reference",
                    "--kb-timing=off", "--kb-trials=1", "-n", "2", timeout=900)
    assert doc is not None, proc.stdout + proc.stderr
    items = by_problem(doc)
    for pid in valid8:
        it = items[pid]
        assert it["outcome"] == "passed" and it["world_size"] == 8, (pid, it.get("failure"), it.get("message"))
        assert all(s["cost"]["link_bytes"] > 0 for s in it["sizes"])
    assert doc["aggregates"]["pass_x_gm"] is None          # no timing, no score: not a fake 0
