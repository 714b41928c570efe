"""Run the real plugin in a subprocess on a throwaway problem tree, and read its JSON report.

Tests build a tree of copies of a real problem (one copy per candidate under test, so one
pytest run evaluates many candidates) plus a --kb-solutions directory, run pytest on it and
look at what the report says about each item.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBLEMS = REPO / "problems"

# an honest all_reduce candidate: a point-to-point ring, legal where only collectives are forbidden
RING = """import torch.distributed as dist

def solution(x):
    # point-to-point ring: legal where only collectives are forbidden
    rank, world = dist.get_rank(), dist.get_world_size()
    acc, buf = x.float(), x.clone()
    for step in range(1, world):
        req = dist.isend(x, (rank + step) % world)
        dist.recv(buf, (rank - step) % world)
        req.wait()
        acc += buf.float()
    return acc.to(x.dtype)
"""


def plugin_args() -> list[str]:
    """The README's no-install route; with the package installed too, the entry point (named after
    the module) and -p are one registration."""
    return ["-p", "pytest_kernelbench.plugin"]


def make_tree(root: Path, candidates: dict[str, str], base: str = "collective/all_reduce",
              yaml_patch: dict | None = None) -> tuple[Path, Path]:
    """problems/<category>/<name>/ copies of `base`, one per candidate; solutions/<category>/<name>.py."""
    import yaml
    problems, solutions = root / "problems", root / "solutions"
    category = base.split("/")[0]
    for name, source in candidates.items():
        dst = problems / category / name
        shutil.copytree(PROBLEMS / base, dst, ignore=shutil.ignore_patterns("solutions", "__pycache__"))
        data = yaml.safe_load((dst / "problem.yaml").read_text())
        data.pop("solutions", None)      # the copy ships no solutions/ folder
        data.update(yaml_patch or {})
        (dst / "problem.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        (solutions / category).mkdir(parents=True, exist_ok=True)
        (solutions / category / f"{name}.py").write_text(source)
    return problems, solutions


def inner_env(**extra: str) -> dict[str, str]:
    """The environment of a pytest run inside a test: the repo importable, none of the outer
    run's options (PYTEST_ADDOPTS: the inner run's own turn unused plugins off), and a fixed
    terminal width, since pytest cuts its short summary at the width and a wide CI terminal
    (COLUMNS) would change what assertions see. CI and BUILD_NUMBER go too: with either set, pytest stops cutting that summary at all."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI", "BUILD_NUMBER")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env["COLUMNS"] = "100"
    # third-party plugins some machines carry (hypothesis; anyio, which litellm brings) that no inner
    # run uses: where no bytecode is written (PYTHONDONTWRITEBYTECODE), pytest rewrites their ~100
    # modules at every start, 1.5 of a pytest start's 2 s of CPU; `-p no:` of an absent one is a no-op
    env["PYTEST_ADDOPTS"] = "-p no:anyio -p no:hypothesispytest"
    env.update(extra)
    return env


def run(root: Path, *args, timeout: float = 600, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict | None]:
    report = root / "report.json"
    cmd = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q", "-rA",
           f"--kb-report={report}", *args]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout, env=inner_env(**(env or {})))
    doc = json.loads(report.read_text()) if report.exists() else None
    return proc, doc


def by_problem(doc: dict) -> dict[str, dict]:
    return {i["problem"]: i for i in doc["items"]}


def _running_thread(pid: str) -> str | None:
    """/proc path of a thread of the process that is not a zombie, or None (its own oracle, not
    the plugin's: once the main thread has exited, /proc/<pid> itself shows a zombie whose
    environment and working directory cannot be read, while its other threads run on)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    return f"/proc/{pid}/task/{tid}"
        except OSError:
            pass
    return None


def leftover_processes(marker: str) -> list[str]:
    """Processes whose command line, environment or working directory mentions `marker` (a tmp
    path of the test). A rank forked by the rank server shows the zygote's command line and
    environment, but works in its job's folder: the working directory finds it."""
    found = []
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        where = _running_thread(pid)
        if where is None:
            continue
        try:
            with open(f"{where}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"{where}/environ", "rb") as f:
                env = f.read().decode(errors="replace")
            cwd = os.readlink(f"{where}/cwd")
        except OSError:
            continue
        if marker in cmd or marker in env or cwd.startswith(marker):
            found.append(f"{pid}: {cmd[:200]} (cwd {cwd})")
    return found


def explain(item: dict) -> str:
    """An item's own account of itself, for assertion messages: outcome, category, message and the
    end of its log, so that a reader tells a slow machine from a regression without rerunning."""
    if not isinstance(item, dict):
        return repr(item)
    head = f"{item.get('outcome')}:{item.get('failure')} after {item.get('wall_s')} s: {item.get('message')}"
    tail = (item.get("log_tail") or "")[-1500:]
    return head + (f"\n--- log tail ---\n{tail}" if tail else "")


# a candidate whose first call deadlocks: rank 0 waits for a message nobody sends (the commonest
# bug of a new kernel; tests/test_deadlock.py, tests/test_evaluate.py)
FIRST_CALL_RECV = '''import torch
import torch.distributed as dist

def solution(x):
    buf = torch.empty_like(x)
    if dist.get_rank() == 0:
        dist.recv(buf, 1)         # nobody sends
    return x.clone()
'''
