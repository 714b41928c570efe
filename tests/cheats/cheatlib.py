"""Shared pieces of the red-team suite: an honest all-reduce written with point-to-point calls
(allowed by the all_reduce problem, whose forbid list is collectives + symm_mem ops), and
helpers to look at what a judged run left behind."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import NamedTuple

# Prefix of most candidates: the correct answer computed without a forbidden call, so each cheat
# below fails for the one thing it does wrong, not for being unable to communicate.
HONEST = '''
import torch
import torch.distributed as dist

def _p2p_sum(x):
    r, w = dist.get_rank(), dist.get_world_size()
    acc = x.float()
    for k in range(1, w):      # grouped send/recv pairs (a ring of lone sends deadlocks on NCCL)
        buf = torch.empty_like(x)
        ops = [dist.P2POp(dist.isend, x.contiguous(), (r + k) % w), dist.P2POp(dist.irecv, buf, (r - k) % w)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        acc += buf.float()
    return acc.to(x.dtype)
'''


class Tree(NamedTuple):
    """Candidates of a test file that need knobs of their own in the red team's one run
    (conftest.py): another base problem, a deadline, and an environment that only their items' ranks
    get (a dev knob such as KB_SPIN or KB_DEV_ROUND_S)."""
    candidates: dict[str, str]
    base: str = "collective/all_reduce"
    env: dict[str, str] = {}
    timeout_s: float | None = None


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under root (the problem tree before/after a run)."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def processes_with(needle: str) -> list[str]:
    """Live (non-zombie) processes whose command line contains `needle`."""
    from kbrun import leftover_processes
    return leftover_processes(needle)


def rank_logs(item: dict) -> str:
    """All rank logs of an item whose job folder was kept."""
    job = item.get("job_dir")
    if not job:
        return ""
    return "\n".join(p.read_text(errors="replace") for p in sorted(Path(job, "logs").glob("rank*.log*")))


def item(judged, name):
    return judged["items"][f"collective/{name}"]


def failed(judged, name, category, *words):
    it = item(judged, name)
    assert it["outcome"] == "failed", f"{name} was not caught: {it['outcome']} {it.get('message')}"
    assert it["failure"] == category, f"{name}: expected {category}, got {it['failure']}: {it['message']}"
    for w in words:
        assert w in it["message"], f"{name}: {w!r} not in {it['message']!r}"
    return it
