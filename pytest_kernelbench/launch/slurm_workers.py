"""Items spread over the nodes of a Slurm allocation (`--kb-slurm-workers=N`): each xdist worker
is a Slurm step on one node (`srun -u -N1 -n1 --exact python`), with its own rank server, GPU
pool and job folders; Slurm places the steps, xdist balances the items.

Measured on a simulated 2-node Slurm (tests/test_slurm.py):
- steps inherit the allocation's options through job-level SLURM_* variables (SLURM_GPUS_PER_NODE
  from `salloc --gpus-per-node` gives every step the whole node, SLURM_NTASKS makes `-n1` clash),
  so the controller drops them before it starts a step and keeps only what names the allocation;
- execnet needs `srun -u` (unbuffered: without it the worker's bootstrap hangs);
- the project and its Python must be at the same path on every node: checked at start by one
  step per node (`same_path_on_every_node`), a clear error instead of a worker that cannot start.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import MutableMapping

# what a step needs to join the allocation it runs in; every other SLURM_* is an option of the
# allocation that would leak into each step (or a fact of the controller's own step)
KEEP = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CONF", "SLURM_CLUSTER_NAME")
CHECK_TIMEOUT_S = 120.0
_ALLOCATION: dict[str, str] = {}      # this process's SLURM_* before they were dropped (cluster_layout)


def drop_job_options(env: MutableMapping[str, str], keep: tuple[str, ...] = KEEP) -> list[str]:
    """Remove the allocation's SLURM_* options from `env` (in place); returns what was removed."""
    gone = sorted(k for k in env if k.startswith("SLURM_") and k not in keep)
    if env is os.environ:
        _ALLOCATION.update({k: env[k] for k in gone})
    for k in gone:
        del env[k]
    return gone


def srun_prefix(nodes: int = 1, tasks_per_node: int = 1, gpus_per_node: int = 0) -> list[str]:
    cmd = ["srun", "-u", f"-N{nodes}", f"--ntasks-per-node={tasks_per_node}", "--exact"]
    if gpus_per_node:
        cmd.append(f"--gpus-per-node={gpus_per_node}")
    return cmd


def tx_specs(n: int, python: str = sys.executable) -> list[str]:
    """xdist gateway specs: n workers, each `python` started by its own one-task step."""
    return [f"{n}*popen//python=srun -u -N1 -n1 --exact {python}"]


_PROBE = ("import json, os, socket, sys, pytest_kernelbench as k; "
          "print(json.dumps({'node': os.environ.get('SLURMD_NODENAME') or socket.gethostname(), "
          "'python': sys.executable, 'package': os.path.dirname(k.__file__), 'cwd': os.getcwd()}))")


def same_path_on_every_node(cwd: str, env: dict[str, str] | None = None) -> list[str]:
    """One task on every node of the allocation reports its Python, the package it imports and
    whether the project folder is there; returns the differences from this process (empty: same)."""
    env = dict(os.environ if env is None else env)
    drop_job_options(env)
    import pytest_kernelbench as k
    here = {"python": sys.executable, "package": os.path.dirname(k.__file__), "cwd": cwd}
    nodes = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or "1"
    cmd = [*srun_prefix(int(nodes)), sys.executable, "-c", _PROBE]
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [f"could not run `{' '.join(cmd[:6])} ...` to check the nodes: {e}"]
    if r.returncode != 0:
        tail = " | ".join(r.stderr.strip().splitlines()[-3:])
        return [f"a node could not start {sys.executable} in {cwd} (srun exit {r.returncode}): {tail}"]
    problems = []
    for line in r.stdout.splitlines():
        try:
            there = json.loads(line)
        except ValueError:
            continue
        for key, value in here.items():
            if there.get(key) != value:
                problems.append(f"node {there.get('node')}: {key} is {there.get(key)!r}, here {value!r}")
    return problems


# one task on one node: its machine facts (spec/hardware.py) and, where it has GPUs, its
# calibrated ceilings (metrics/calibrate.py, cached on that node), as one line on stdout
MACHINE_LINE = "kb-machine "
_MACHINE_PROBE = ("import json, os, sys; from pytest_kernelbench.spec import hardware; m = hardware.machine_info(); "
                  "m['facts_from'] = {'node': os.environ.get('SLURMD_NODENAME'), 'step': "
                  "os.environ.get('SLURM_JOB_ID', '') + '.' + os.environ.get('SLURM_STEP_ID', '')}; "
                  "c = sys.argv[1]\n"
                  "if m.get('gpu_count') and c != 'off':\n"
                  "    from pytest_kernelbench.metrics import calibrate\n"
                  "    m['calibration'] = calibrate.calibrated(m, force=c == 'force')\n"
                  "    m['ceilings'] = calibrate.ceilings(m, m['calibration'])\n"
                  f"print({MACHINE_LINE!r} + json.dumps(m, default=str), flush=True)")
PROBE_TIMEOUT_S = 900.0       # a first calibration on the node measures its GPUs


def facts_from_a_node(launcher: str, workers: int | None, env: dict[str, str] | None = None) -> bool:
    """Whether the report's machine facts must come from a compute node: the items run on the
    nodes (worker steps, or one step per item), and this process may be a login node without GPUs."""
    env = {**_ALLOCATION, **(dict(os.environ) if env is None else env)}
    return bool(env.get("SLURM_JOB_ID")) and (launcher == "slurm" or bool(workers))


_NODE_MACHINE: dict[str, dict] = {}      # this process's probe, once (node_machine)


def node_machine(cwd: str, calibrate: str = "auto", env: dict[str, str] | None = None) -> dict:
    """The machine facts of one node of the allocation, from a one-task step (`srun -N1 -n1`) that
    runs spec/hardware.py's probe there (and calibrates its GPUs; cached on the node). On failure,
    {"error": why}; the caller then falls back to this process's facts and says so. Probed once
    per process: with --kb-slurm-workers before the workers' steps take the allocation's task
    slots (a step asked for later would wait for one of them to end)."""
    if "probe" not in _NODE_MACHINE:
        _NODE_MACHINE["probe"] = _probe_node(cwd, calibrate, env)
    return dict(_NODE_MACHINE["probe"])


def _probe_node(cwd: str, calibrate: str, env: dict[str, str] | None) -> dict:
    env = dict(os.environ if env is None else env)
    gpus = cluster_layout(env) or {}
    drop_job_options(env)
    cmd = [*srun_prefix(1, 1, int(gpus["gpus_per_node"]) if str(gpus.get("gpus_per_node") or "").isdigit() else 0),
           sys.executable, "-c", _MACHINE_PROBE, calibrate]
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"`{' '.join(cmd[:6])} ...`: {e}"}
    for line in r.stdout.splitlines():
        if line.startswith(MACHINE_LINE):
            try:
                return dict(json.loads(line[len(MACHINE_LINE):]))
            except ValueError:
                break
    tail = " | ".join(r.stderr.strip().splitlines()[-3:])
    return {"error": f"srun exit {r.returncode}, no machine facts: {tail}"}


def where() -> tuple[str, str | None]:
    """Which node and Slurm step run this process (for the item's record): (host, "<job>.<step>")."""
    import socket
    job, step = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID")
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname(), (f"{job}.{step}" if job and step else None)


def cluster_layout(env: dict[str, str] | None = None) -> dict | None:
    """The allocation this run is inside (for the report's machine facts and header), or None."""
    env = {**_ALLOCATION, **(dict(os.environ) if env is None else env)}
    if not env.get("SLURM_JOB_ID"):
        return None
    gpus = env.get("SLURM_GPUS_PER_NODE") or env.get("SLURM_GPUS_ON_NODE")
    return {"job": env["SLURM_JOB_ID"], "cluster": env.get("SLURM_CLUSTER_NAME"),
            "nodes": int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 1),
            "nodelist": env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"),
            "gpus_per_node": gpus.split(":")[-1] if gpus else None}


def describe_layout(layout: dict, workers: int | None, item_nodes: int) -> str:
    gpus = f", {layout['gpus_per_node']} GPUs per node" if layout.get("gpus_per_node") else ""
    spread = f"; items over {workers} worker steps" if workers else "; items run from this node"
    span = f"; each item's ranks over {item_nodes} nodes (one srun step each)" if item_nodes > 1 else ""
    return f"Slurm job {layout['job']}: {layout['nodes']} nodes ({layout.get('nodelist')}){gpus}{spread}{span}"
