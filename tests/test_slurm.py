"""The suite on a Slurm cluster (issue 26), on a real Slurm simulated on this machine
(tests/slurm_cluster.py: two slurmd "nodes" n1/n2 on this host). Skips where Slurm cannot start."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from kbrun import REPO, by_problem, explain, inner_env, leftover_processes, make_tree, plugin_args
from slurm_cluster import SlurmCluster, SlurmUnavailable, _marked
from test_harness_cpu import CANDIDATES

# a real (simulated) Slurm cluster and the steps it starts: every test here is end to end
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster():
    root = Path(tempfile.mkdtemp(prefix="kbslurm-"))   # short: the munge socket path has a length limit
    c = SlurmCluster(root)
    try:
        c.start()
    except SlurmUnavailable as e:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"no Slurm here: {e}")
    yield c
    c.stop()
    left = _marked(str(root))
    shutil.rmtree(root, ignore_errors=True)
    assert not left, f"processes of the simulated cluster left after stop: {left}"


def test_cluster_has_two_nodes(cluster):
    r = cluster.run(["srun", "-N2", "--ntasks-per-node=1", "bash", "-c", 'echo "$SLURM_PROCID $SLURMD_NODENAME"'])
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:-1]) == ["0 n1", "1 n2"]


# ---- 1. items spread over the nodes: --kb-slurm-workers ---------------------------------------------
SELECTION = ["problems/collective/all_reduce", "problems/collective/broadcast", "problems/collective/all_gather",
             "problems/collective/reduce"]


def _inner(cluster: SlurmCluster, report: Path, *args: str, salloc: list[str] | None = None,
           timeout: float = 500) -> tuple[subprocess.CompletedProcess, dict | None]:
    """pytest with the plugin, from the repo root; under `salloc` when given (an allocation)."""
    env = {**inner_env(), "SLURM_CONF": cluster.env["SLURM_CONF"], "KB_SLURM_CLUSTER": cluster.env["KB_SLURM_CLUSTER"]}
    cmd = [*(salloc or []), sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q",
           f"--kb-report={report}", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    return proc, (json.loads(report.read_text()) if report.exists() else None)


def test_worker_steps_spread_items_over_both_nodes(cluster, tmp_path):
    """(a) A CPU selection through Slurm worker steps runs on both nodes, each record names its node
    and step, and the verdicts are those of a local run."""
    args = [*SELECTION, "--kb-device=cpu", "--kb-nproc=2"]
    local, local_doc = _inner(cluster, tmp_path / "local.json", *args)
    assert local_doc, local.stdout[-2000:] + local.stderr[-2000:]
    proc, doc = _inner(cluster, tmp_path / "slurm.json", *args, "--kb-slurm-workers=2",
                       salloc=["salloc", "-N2", "--ntasks-per-node=1"])
    assert doc, proc.stdout[-2000:] + proc.stderr[-2000:]
    verdicts = {i["problem"]: (i["outcome"], i.get("failure")) for i in doc["items"]}
    assert verdicts == {i["problem"]: (i["outcome"], i.get("failure")) for i in local_doc["items"]}
    assert set(verdicts) == {s.split("/", 1)[1] for s in SELECTION}
    assert {i["host"] for i in doc["items"]} == {"n1", "n2"}, [(i["problem"], i.get("host")) for i in doc["items"]]
    steps = {i["host"]: i["slurm_step"] for i in doc["items"]}
    assert all(re.fullmatch(r"\d+\.\d+", s) for s in steps.values()) and len(set(steps.values())) == 2, steps
    assert all(i.get("slurm_step") is None for i in local_doc["items"])
    assert not cluster.stray(), "a worker step outlived the run"
    # the report and its header name the cluster layout
    assert doc["machine"]["cluster"]["nodes"] == 2 and doc["machine"]["cluster"]["nodelist"] == "n[1-2]"
    assert re.search(r"kernelbench: Slurm job \d+: 2 nodes \(n\[1-2\]\); items over 2 worker steps", proc.stdout), \
        proc.stdout[:1500]
    assert local_doc["machine"]["cluster"] is None
    # machine facts from a compute node (a one-task step ran the probe there), named in the header
    assert doc["machine"]["facts_from"]["node"] in ("n1", "n2"), doc["machine"].get("facts_from")
    assert re.search(r"kernelbench: CPU only: .* \[facts from node n[12]\]", proc.stdout), proc.stdout[:1500]
    assert "facts_from" not in local_doc["machine"]


def test_worker_steps_need_an_allocation(cluster, tmp_path):
    proc, doc = _inner(cluster, tmp_path / "r.json", SELECTION[0], "--kb-device=cpu", "--kb-slurm-workers=2")
    assert proc.returncode == 4 and "inside a Slurm allocation" in proc.stderr, proc.stderr[-1000:]


def test_worker_steps_drop_the_allocations_options():
    from pytest_kernelbench.launch.slurm_workers import drop_job_options
    env = {"SLURM_JOB_ID": "7", "SLURM_CONF": "/c", "SLURM_GPUS_PER_NODE": "8", "SLURM_NTASKS": "16", "PATH": "/bin"}
    assert drop_job_options(env) == ["SLURM_GPUS_PER_NODE", "SLURM_NTASKS"]
    assert env == {"SLURM_JOB_ID": "7", "SLURM_CONF": "/c", "PATH": "/bin"}


# ---- 2. items whose ranks span nodes: --kb-launcher=slurm --kb-nodes=2 -------------------------------
# a candidate after the key: the step's stdin carried it to the checker, so it reads its own stdin
# and every pipe its checker holds; an honest all_reduce when it found nothing
KEY_THIEF = """
import glob, os
import torch.distributed as dist
found = []
try:
    os.set_blocking(0, False)
    data = os.read(0, 4096)
    if data:
        found.append(f"stdin: {data[:80]!r}")
except OSError:
    pass
for path in glob.glob(f"/proc/{os.getppid()}/fd/*"):
    try:
        if not os.readlink(path).startswith("pipe:"):
            continue
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        if data:
            found.append(f"{path}: {data[:80]!r}")
    except OSError:
        pass

def solution(x):
    if found:
        raise ValueError("read the launcher's pipe: " + "; ".join(found))
    out = x.clone()
    dist.all_reduce(out)
    return out
"""
SPAN = {**{name: CANDIDATES[name] for name in ("good", "hangs", "exits_on_rank1")}, "key_thief": KEY_THIEF}
SPAN_TIMEOUT_S = 20


@pytest.fixture(scope="module")
def spanned(cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("span")
    problems, solutions = make_tree(root, SPAN, yaml_patch={"forbid": []})
    proc, doc = _inner(cluster, root / "report.json", str(problems), f"--kb-solutions={solutions}", "--kb-device=cpu",
                       "--kb-nproc=2", "--kb-launcher=slurm", "--kb-nodes=2", f"--kb-timeout={SPAN_TIMEOUT_S}",
                       salloc=["salloc", "-N2", "--ntasks-per-node=1"])
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"items": by_problem(doc), "root": root, "proc": proc}


def test_item_spanning_two_nodes_passes_with_one_rank_per_node(spanned):
    it = spanned["items"]["collective/good"]
    assert it["outcome"] == "passed", explain(it)
    assert it["hosts"] == ["n1", "n2"] and re.fullmatch(r"\d+\.\d+", it["slurm_step"]), (it["hosts"], it["slurm_step"])
    assert "each item's ranks over 2 nodes" in spanned["proc"].stdout


def test_candidate_cannot_read_the_key_from_the_steps_stdin(spanned):
    """The key reaches each checker on the step's stdin; its candidate process (stdin /dev/null,
    the checker's copy of the pipe closed in it, Landlock around /proc/<checker>/fd) reads nothing."""
    it = spanned["items"]["collective/key_thief"]
    assert it["outcome"] == "passed", explain(it)


def test_crashing_rank_is_named_with_its_exit_code(spanned):
    it = spanned["items"]["collective/exits_on_rank1"]
    assert it["failure"] == "crash", explain(it)
    assert "rank 1" in it["message"] and "exit code 7" in it["message"], it["message"]
    exits = json.loads((Path(it["job_dir"]) / "logs" / "exits.json").read_text())
    # both checkers agreed on the failure and exited 3 (its details came from their error files)
    assert exits["launcher"] == "slurm" and exits["exits"]["1"] != 0, exits
    assert exits["hosts"] == {"0": "n1", "1": "n2"}
    job = json.loads((Path(it["job_dir"]) / "job.json").read_text())
    assert job["pg_timeout_s"] >= 60, "ranks on several nodes get a longer process-group timeout"


def test_hang_meets_the_deadline_with_stack_dumps_and_leaves_nothing(spanned, cluster):
    it = spanned["items"]["collective/hangs"]
    assert it["failure"] == "timeout", explain(it)
    assert it["wall_s"] <= SPAN_TIMEOUT_S + 20
    logs = Path(it["job_dir"]) / "logs"
    srun_log = (logs / "srun.log").read_text()
    assert re.search(r"scancel -s TERM \d+\.\d+: exit 0", srun_log), srun_log[-2000:]
    for rank in (0, 1):     # scancel's SIGTERM reached both nodes: each checker dumped its stack
        text = (logs / f"checker{rank}.log").read_text(errors="replace")
        assert "most recent call first" in text, f"rank {rank}: no stack dump in its log:\n{text[-1500:]}"
    assert not cluster.stray(), "a step daemon or task outlived its item"
    assert not leftover_processes(str(spanned["root"]))


def test_launcher_writes_the_root_cause_from_sruns_lines(cluster, tmp_path):
    """srun says how tasks ended only in `srun: error: NODE: task R: ...` lines; the launcher keeps
    the first task that failed on its own (rank 1, code 9), not the one it then terminated."""
    from pytest_kernelbench.launch.slurm import SlurmRanks
    (tmp_path / "logs").mkdir()
    cmd = ["srun", "-v", "-u", "-N2", "--ntasks-per-node=1", "--exact", "--kill-on-bad-exit=1", "--input=all",
           "bash", "-c", '[ "$SLURM_PROCID" = 1 ] && exit 9; exec sleep 60']
    ranks = SlurmRanks(cmd, tmp_path, 2, {**cluster.env, "PATH": os.environ["PATH"]}, tmp_path)
    assert ranks.wait(timeout=60) != 0
    exits = json.loads((tmp_path / "logs" / "exits.json").read_text())
    assert exits["root_cause"] == 1 and exits["exits"]["1"] == 9 and exits["exits"]["0"] < 0, exits
    assert exits["hosts"] == {"0": "n1", "1": "n2"} and re.fullmatch(r"\d+\.\d+", exits["step"])


# ---- 3. the GPU lease pool, keyed by host -----------------------------------------------------------
def test_pools_of_two_hosts_sharing_a_home_do_not_interfere(tmp_path):
    """(c) One cache folder seen by two nodes: each node leases its own GPUs, and a lease of node
    n1 (its pid means nothing on n2) is never reclaimed by n2."""
    import json as _json

    from pytest_kernelbench.launch.gpus import GpuPool
    shared = tmp_path / "gpu-leases-all.json"
    n1, n2 = GpuPool(shared, [0, 1], host="n1"), GpuPool(shared, [0, 1], host="n2")
    assert n1.try_acquire(2, "a") == [0, 1]
    assert n2.try_acquire(2, "b") == [0, 1]         # n2's GPUs 0 and 1 are other GPUs
    assert n1.try_acquire(1, "c") is None and n2.try_acquire(1, "d") is None
    # a file both nodes read (an older layout, a copied file): n2 leaves n1's lease alone
    state = _json.loads(n2.path.read_text())
    state["held"]["0"] = {"pid": 2 ** 22 + 12345, "host": "n1", "item": "x", "since": 0.0}
    n2.release([0, 1], "b")
    n2.path.write_text(_json.dumps({**_json.loads(n2.path.read_text()), "held": {"0": state["held"]["0"]}}))
    assert n2.try_acquire(2, "e") is None and n2.try_acquire(1, "f") == [1]


def test_gpu_leases_on_two_nodes_at_once(cluster, tmp_path):
    """Through real steps on n1 and n2 (one host name, as in a shared-home cluster): both take the
    whole pool at the same time, none waits for the other's lease."""
    code = ("import sys, time; from pathlib import Path; from pytest_kernelbench.launch.gpus import GpuPool; "
            "p = GpuPool(Path(sys.argv[1]), [0, 1]); t = time.monotonic(); "
            "lease = p.lease(2, 'item', timeout_s=20, poll_s=0.05); info = lease.__enter__(); "
            "print(p.host, info['gpus'], round(time.monotonic() - t, 2), flush=True); time.sleep(4); "
            "lease.__exit__(None, None, None)")
    r = cluster.run(["srun", "-N2", "--ntasks-per-node=1", "--exact", sys.executable, "-c", code,
                     str(tmp_path / "gpu-leases-all.json")], env={"PYTHONPATH": str(REPO)}, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    got = sorted(line.split(" ", 1) for line in r.stdout.splitlines())
    assert [host for host, _ in got] == ["n1", "n2"], r.stdout
    for _, rest in got:
        gpus, waited = rest.rsplit(" ", 1)
        assert gpus == "[0, 1]" and float(waited) < 2.0, r.stdout


def test_ranks_environment_has_no_slurm_variables(monkeypatch):
    """A rank started by the fork or torchrun launcher inside a step must not see the step's (or
    the allocation's) SLURM_* variables: they describe the worker's step, not the rank."""
    from pytest_kernelbench import launch
    monkeypatch.setenv("SLURM_GPUS_PER_NODE", "8")
    monkeypatch.setenv("SLURM_PROCID", "3")
    env = launch._env("tok", None, None)
    assert not [k for k in env if k.startswith("SLURM_")]


def test_nodes_need_the_slurm_launcher(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "--kb-nodes=2", "--co", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, env=inner_env())
    assert proc.returncode == 4 and "only with --kb-launcher=slurm" in proc.stderr, proc.stderr[-500:]


def test_the_slurm_launcher_outside_an_allocation_is_a_usage_error(tmp_path):
    """Outside an allocation every item's srun failed ("srun: fatal: Could not establish a
    configuration source"), each charged to its candidate as a crash and kept as a leaderboard row:
    now one line up front, before any item, as --kb-slurm-workers says it."""
    env = {k: v for k, v in inner_env().items() if not k.startswith("SLURM_")}
    proc = subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider",
                           str(REPO / "problems"), "-k", "all_reduce", "--kb-launcher=slurm"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("ERROR")]
    assert errors == ["ERROR: --kb-launcher=slurm runs inside a Slurm allocation (salloc / sbatch): no SLURM_JOB_ID "
                      "here"], proc.stderr[-2000:]
    assert not (tmp_path / "reports").exists() and "crash" not in proc.stdout    # no item ran, no report


def test_readme_sbatch_recipe(cluster, tmp_path):
    """The sbatch script of docs/slurm.md, shrunk to this cluster: a batch job whose pytest spreads the items
    over worker steps on both nodes."""
    report = tmp_path / "batch.json"
    script = tmp_path / "job.sh"
    script.write_text(f"""#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --output={tmp_path}/batch.out
cd {REPO}
{sys.executable} -m pytest {' '.join(plugin_args())} -p no:cacheprovider -q {SELECTION[0]} {SELECTION[1]} \\
    --kb-device=cpu --kb-nproc=2 --kb-slurm-workers=2 --kb-report={report}
""")
    env = {**inner_env(), "SLURM_CONF": cluster.env["SLURM_CONF"], "KB_SLURM_CLUSTER": cluster.env["KB_SLURM_CLUSTER"]}
    r = subprocess.run(["sbatch", "--wait", str(script)], env=env, capture_output=True, text=True, timeout=500)
    out = (tmp_path / "batch.out").read_text() if (tmp_path / "batch.out").exists() else ""
    assert r.returncode == 0 and report.exists(), r.stderr + out[-2000:]
    items = json.loads(report.read_text())["items"]
    assert [i["outcome"] for i in items] == ["passed", "passed"], out[-2000:]
    assert {i["host"] for i in items} == {"n1", "n2"}


# ---- 4. placement over nodes, and what the ranks learn of the layout ---------------------------------
def _place(problem_id: str, nodes: int, nproc: int | None = None, **patch):
    import dataclasses
    from types import SimpleNamespace

    from pytest_kernelbench.options import Settings
    from pytest_kernelbench.session import KBSession
    from pytest_kernelbench.spec.problem import load_problem
    problem = load_problem(REPO / "problems" / problem_id / "problem.yaml", REPO / "problems")
    problem = dataclasses.replace(problem, **patch)
    settings = Settings(device="cpu", nodes=nodes, nproc=nproc, launcher="slurm" if nodes > 1 else "fork")
    return KBSession.place(SimpleNamespace(settings=settings, gpu_count=0), problem)   # type: ignore[arg-type]


def test_world_sizes_must_split_evenly_over_the_nodes():
    from pytest_kernelbench.session import Skip
    assert _place("collective/all_reduce", nodes=2, nproc=4).world_size == 4
    with pytest.raises(Skip, match=r"world size 3 is not valid here \(valid: 2, 4 over --kb-nodes=2\)"):
        _place("collective/all_reduce", nodes=2, nproc=3, world_sizes=(2, 3, 4))
    with pytest.raises(Skip, match=r"no world size splits evenly over --kb-nodes=3 \(world sizes: 2, 4, 8\)"):
        _place("collective/all_reduce", nodes=3)
    # without --kb-nproc: the largest world size that fits and splits
    assert _place("collective/all_reduce", nodes=2, world_sizes=(2, 3)).world_size == 2
    assert _place("collective/all_reduce", nodes=1, world_sizes=(2, 3)).world_size == 3


def test_ranks_learn_the_layout_from_slurms_variables():
    from pytest_kernelbench.launch.env import job_env
    from pytest_kernelbench.rank.steps import slurm_env
    env = slurm_env({"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
                     "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NUM_NODES": "2"})
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["GROUP_RANK"],
            env["KB_NODES"]) == ("3", "4", "1", "2", "1", "2")
    assert job_env("tok", None, None)["KB_NODES"] == "1"       # fork/torchrun: one node, LOCAL_WORLD_SIZE = W


# ---- 5. multi-node problems: valid only over >= 2 nodes, run on the simulated cluster ----------------
MULTI_NODE = ["problems/collective/hierarchical_allreduce", "problems/collective/internode_alltoall"]
# wrong where it matters: each sums (exchanges) only inside its own node, as if the network were not there
WRONG_ACROSS_NODES = {
    "hierarchical_allreduce": """
import os
import torch.distributed as dist
_g = {}

def solution(x):
    w, r, lw = dist.get_world_size(), dist.get_rank(), int(os.environ["LOCAL_WORLD_SIZE"])
    if "intra" not in _g:
        for m in range(w // lw):
            g = dist.new_group(list(range(m * lw, (m + 1) * lw)))
            if r // lw == m:
                _g["intra"] = g
    out = x.clone()
    dist.all_reduce(out, group=_g["intra"])
    return out
""",
    "internode_alltoall": """
import torch
import torch.distributed as dist

def solution(x):
    # the world exchange, but every chunk from another node left as zeros
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    lw = int(__import__("os").environ["LOCAL_WORLD_SIZE"])
    c, node = x.numel() // dist.get_world_size(), dist.get_rank() // lw
    view = out.view(-1, c)
    for j in range(view.shape[0]):
        if j // lw != node:
            view[j].zero_()
    return out
""",
}
# right: the flat world operation (what NCCL does without knowing the nodes) equals the hierarchical reference
FLAT = {
    "hierarchical_allreduce": "import torch.distributed as dist\n\n\ndef solution(x):\n"
                               "    out = x.clone()\n    dist.all_reduce(out)\n    return out\n",
    "internode_alltoall": "import torch\nimport torch.distributed as dist\n\n\ndef solution(x):\n"
                            "    out = torch.empty_like(x)\n    dist.all_to_all_single(out, x)\n    return out\n",
}
SKIP_ONE_NODE = "needs --kb-nodes >= 2 (ranks on two or more nodes)"


def test_multi_node_problems_skip_in_a_one_node_run(tmp_path):
    """Not a failure and not counted: a one-node run skips them with the reason."""
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q", "-rs",
                           f"--kb-report={report}", *MULTI_NODE, "--kb-device=cpu"],
                          cwd=REPO, env=inner_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 5) and report.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(report.read_text())
    assert [(i["outcome"], i["message"]) for i in doc["items"]] == [("skipped", SKIP_ONE_NODE)] * 2
    assert doc["aggregates"]["total"] == 0 and doc["aggregates"]["failed"] == 0, doc["aggregates"]


@pytest.fixture(scope="module")
def multi_node(cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("multinode")
    for folder, sources in (("wrong", WRONG_ACROSS_NODES), ("flat", FLAT)):
        (root / folder / "collective").mkdir(parents=True)
        for name, source in sources.items():
            (root / folder / "collective" / f"{name}.py").write_text(source)
    common = [*MULTI_NODE, "--kb-device=cpu", "--kb-nproc=4", "--kb-launcher=slurm", "--kb-nodes=2",
              f"--kb-timeout={SPAN_TIMEOUT_S * 3}"]
    alloc = ["salloc", "-N2", "--ntasks-per-node=2"]
    ref, ref_doc = _inner(cluster, root / "ref.json", *common, "--kb-candidate=reference", salloc=alloc)
    assert ref_doc, ref.stdout[-3000:] + ref.stderr[-2000:]
    out = {"reference": by_problem(ref_doc), "machine": ref_doc["machine"], "stdout": ref.stdout}
    for folder in ("wrong", "flat"):
        proc, doc = _inner(cluster, root / f"{folder}.json", *common, f"--kb-solutions={root / folder}",
                           "--kb-solutions-only", salloc=alloc)
        assert doc, proc.stdout[-3000:] + proc.stderr[-2000:]
        out[folder] = by_problem(doc)
    return out


@pytest.mark.parametrize("problem", [p.split("/", 1)[1] for p in MULTI_NODE])
def test_multi_node_problem_reference_passes_over_two_nodes(multi_node, problem):
    it = multi_node["reference"][problem]
    assert it["outcome"] == "passed", explain(it)
    assert it["hosts"] == ["n1", "n1", "n2", "n2"], it["hosts"]      # 2 ranks per node, ranks 0-1 on n1
    cost = it["sizes"][0]["cost"]           # cost() got nodes=2: bytes over the network apart
    assert cost["inter_node_bytes"] > 0 and cost["link_bytes"] > 0, cost


@pytest.mark.parametrize("problem", [p.split("/", 1)[1] for p in MULTI_NODE])
def test_multi_node_problem_fails_a_candidate_that_ignores_the_other_node(multi_node, problem):
    it = multi_node["wrong"][problem]
    assert it["outcome"] == "failed" and it["failure"] == "mismatch", explain(it)


@pytest.mark.parametrize("problem", [p.split("/", 1)[1] for p in MULTI_NODE])
def test_multi_node_reference_computes_the_flat_operation(multi_node, problem):
    """The hierarchical reference is the world all-reduce / all-to-all: the flat one passes against it."""
    it = multi_node["flat"][problem]
    assert it["outcome"] == "passed", explain(it)


def test_machine_facts_come_from_a_node_under_the_slurm_launcher(multi_node):
    """--kb-launcher=slurm: the ranks run on the nodes, so the report's machine facts are a node's
    (probed by one `srun -N1 -n1` step at start), and the header says which node."""
    src = multi_node["machine"]["facts_from"]
    assert src["node"] in ("n1", "n2") and re.fullmatch(r"\d+\.\d+", src["step"]), src
    assert re.search(r"kernelbench: CPU only: .* \[facts from node n[12]\]", multi_node["stdout"]), \
        multi_node["stdout"][:1500]


def test_facts_come_from_a_node_only_inside_an_allocation_whose_items_run_on_nodes():
    from pytest_kernelbench.launch.slurm_workers import facts_from_a_node
    inside = {"SLURM_JOB_ID": "7"}
    assert facts_from_a_node("slurm", None, inside) and facts_from_a_node("fork", 2, inside)
    assert not facts_from_a_node("fork", None, inside)          # items run here, on this node
    assert not facts_from_a_node("slurm", None, {"PATH": "/bin"}) or "SLURM_JOB_ID" in os.environ


def test_inter_node_bandwidth_is_measured_by_a_two_node_step(cluster):
    """calibrate.inter_node: one task on each node exchanges a buffer through the network (gloo
    here; NCCL over the NICs on GPUs); the figure and the two nodes come back, and feed the ceilings."""
    from pytest_kernelbench.metrics import calibrate
    env = {**os.environ, **cluster.env}
    got = calibrate.inter_node("cpu", env=env, cwd=str(REPO))
    assert got.get("inter_node_bw", 0) > 0 and sorted(got["inter_node_nodes"]) == ["n1", "n2"], got
    c = calibrate.ceilings({"gpu_model": "NVIDIA H100"}, got)
    assert c["inter_node_bw"] == got["inter_node_bw"] and "inter_node_bw measured" in c["source"]
    assert not cluster.stray()


def test_a_step_waiting_for_the_allocations_cpus_is_not_on_the_deadline(cluster, tmp_path):
    """Another step holds a CPU of each node for 25 s (the session's one-task probe step still
    finds one; the item's two tasks a node do not): the item's srun waits for them
    (Slurm's "step creation temporarily disabled"), which is not the candidate's time; then it runs
    and passes under a 15 s deadline. Before, the deadline ran from the launch: "deadline of 15 s
    passed (no rank reported a phase)", the message the full suite met twice under load on the item
    after a failed one (its step, likely, still completing)."""
    report = tmp_path / "r.json"
    pytest_cmd = " ".join([sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q",
                           f"--kb-report={report}", MULTI_NODE[0], "--kb-device=cpu", "--kb-nproc=4",
                           "--kb-launcher=slurm", "--kb-nodes=2", "--kb-candidate=reference", "--kb-timeout=15",
                           "--kb-keep-jobs"])
    script = f"srun -N2 -n2 --ntasks-per-node=1 --exact sleep 25 & sleep 2; {pytest_cmd}; wait"
    env = {**inner_env(), "SLURM_CONF": cluster.env["SLURM_CONF"], "KB_SLURM_CLUSTER": cluster.env["KB_SLURM_CLUSTER"]}
    proc = subprocess.run(["salloc", "-N2", "--ntasks-per-node=2", "bash", "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    (it,) = json.loads(report.read_text())["items"]
    assert it["outcome"] == "passed", explain(it)
    srun_log = (Path(it["job_dir"]) / "logs" / "srun.log").read_text()
    assert it["wall_s"] > 20 and "temporarily disabled" in srun_log, (it["wall_s"], srun_log[-2000:])
