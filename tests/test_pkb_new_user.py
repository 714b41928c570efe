"""ParallelKernelBench as a new user meets it (issue 45, point 6), on the PKB-format fixture
(pkb_fixture.py, never PKB's files): --kb-solutions-only on a CPU machine, a process group in an
in-place problem's arguments, and a reference that needs a module this install lacks."""
from __future__ import annotations

import pytest
from kbrun import run
from pkb_fixture import RING, make_checkout

from pytest_kernelbench.protocol import SOLUTIONS_ONLY_SKIP


@pytest.mark.e2e
def test_solutions_only_leaves_out_pkb_items_that_cannot_run_here(tmp_path):
    """One kernel of one's own against the suite on CPU: 19 (CUDA only) has no file, so it is left
    out like every problem without one, not failed as no_code with two chained exceptions."""
    pkb = make_checkout(tmp_path / "pkb")
    (pkb / "reference" / "4_reduce.py").unlink()        # a reference that does not load errors in every run
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "1_allreduce_cuda.py").write_text(RING)
    proc, doc = run(tmp_path, f"--kb-pkb={pkb}", f"--kb-solutions={mine}", "--kb-solutions-only",
                    "--kb-nproc=2", "--kb-timing=off", timeout=300)
    out = proc.stdout + proc.stderr
    assert doc is not None, out
    items = {i["problem"]: i for i in doc["items"]}
    assert items["pkb/1_allreduce"]["outcome"] == "passed", items["pkb/1_allreduce"].get("message")
    left = {k: (v["outcome"], v.get("message")) for k, v in items.items() if k != "pkb/1_allreduce"}
    assert left and all(v == ("skipped", SOLUTIONS_ONLY_SKIP) for v in left.values()), left
    assert proc.returncode == 0, out[-3000:]
    assert "During handling of the above exception" not in out
    # the table: the kernel that ran, and one line for the rest
    assert f"(and {len(left)} problem(s) without a file in --kb-solutions, skipped: --kb-solutions-only)" in out
    assert not any(line.startswith(tuple(left)) for line in proc.stdout.splitlines())
    # without --kb-solutions-only the missing file is the folder's no_code, told once (no chained Skip)
    (tmp_path / "report.json").unlink()
    (tmp_path / "report.jsonl").unlink()
    proc, doc = run(tmp_path, f"--kb-pkb={pkb}", f"--kb-solutions={mine}", "-k", "19_", "--kb-nproc=2", timeout=300)
    out = proc.stdout + proc.stderr
    assert [(i["problem"], i.get("failure")) for i in doc["items"]] == [("pkb/19_blocked_fp8_quantize", "no_code")], out
    assert "During handling of the above exception" not in out and out.count("no candidate for") <= 2, out
