"""Evaluations per hour, three ways, on the same candidates (issue 47):

    python bench/scoring_throughput.py [--n 8] [--workers 2] [--world 2] [--device cpu] [--md FILE]

1. plain pytest, one item at a time (what a trainer shelling out per candidate pays: a pytest start,
   collection, a rank server's torch import, per candidate);
2. `evaluate_many()`: a batch on `--workers` worker processes (rank servers kept warm);
3. the service (`kernelbench serve`, same workers): a batch over HTTP, streamed.

The candidates alternate an honest all_reduce (point-to-point ring) and a wrong one, on copies of
collective/all_reduce (tests/kbrun.py's tree), at the smallest size without timing: the harness's
own cost, not a kernel's. A benchmark, not a test: figures depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
from kbrun import RING, inner_env, make_tree, plugin_args  # noqa: E402

WRONG = "def solution(x):\n    return x.clone()\n"


def candidates(n: int) -> dict[str, str]:
    return {f"c{k:03d}": RING if k % 2 == 0 else WRONG for k in range(n)}


def by_pytest(root: Path, problems: Path, solutions: Path, names: list[str], world: int, device: str) -> float:
    t0 = time.monotonic()
    for name in names:
        subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q",
                        str(problems / "collective" / name), f"--kb-solutions={solutions}", f"--kb-nproc={world}",
                        f"--kb-device={device}", "--kb-timing=off", f"--kb-report={root / f'{name}.json'}"],
                       cwd=root, env=inner_env(), capture_output=True, timeout=900)
    return time.monotonic() - t0


def by_batch(problems: Path, cands: dict[str, str], workers: int, options: dict) -> tuple[float, list]:
    from pytest_kernelbench import evaluate_many
    t0 = time.monotonic()
    reqs = [{"id": n, "problem": f"collective/{n}", "code": c} for n, c in cands.items()]
    done = list(evaluate_many(reqs, workers=workers, problems_dir=problems, **options))
    assert len(done) == len(reqs)
    return time.monotonic() - t0, done


def split(done: list) -> str:
    """Where a warm evaluation's wall time goes (medians over the batch): the job's launch and
    teardown (wall minus what the ranks measured), the ranks' setup (process group, inputs), the
    candidate's import, correctness (every size's trials), timing."""
    import statistics as st
    recs = [ev.record for ev in done]
    phase = {k: st.median([(r.phases_s or {}).get(k) or 0.0 for r in recs]) for k in ("init_s", "import_s", "sizes_s")}
    wall = st.median([r.wall_s or 0.0 for r in recs])
    timed = st.median([r.timed_s or 0.0 for r in recs])
    launch = wall - sum(phase.values())
    return (f"one warm evaluation (median): wall {wall:.2f} s = launch and teardown {launch:.2f} s + rank setup "
            f"{phase['init_s']:.2f} s + import {phase['import_s']:.3f} s + correctness and timing "
            f"{phase['sizes_s']:.2f} s (of which timed {timed:.2f} s); no build (a pure Python candidate)")


def by_service(root: Path, problems: Path, cands: dict[str, str], workers: int, options: dict) -> float:
    import httpx
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pytest_kernelbench.cli", "serve", "--port", str(port),
                             "--workers", str(workers), "--problems", str(problems)], cwd=root, env=inner_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=900)
        while True:
            try:
                client.get("/v1/health")
                break
            except httpx.TransportError:
                time.sleep(0.2)
        reqs = [{"id": n, "problem": f"collective/{n}", "code": c} for n, c in cands.items()]
        batch = client.post("/v1/batches", json={"requests": reqs, "options": options}).json()
        with client.stream("GET", batch["stream"]) as stream:
            got = [json.loads(ln) for ln in stream.iter_lines() if ln.strip()]
        assert len(got) == len(reqs)
        return time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--md", help="also write the table here")
    a = ap.parse_args()
    cands = candidates(a.n)
    root = Path(tempfile.mkdtemp(prefix="kb-throughput-"))
    problems, solutions = make_tree(root, cands)
    options = {"world_size": a.world, "device": a.device, "timing": False}
    batch_wall, done = by_batch(problems, cands, a.workers, options)
    rows = [("plain pytest, one item at a time", by_pytest(root, problems, solutions, sorted(cands), a.world, a.device)),
            (f"evaluate_many(), {a.workers} workers", batch_wall),
            (f"kernelbench serve, {a.workers} workers (incl. its start)",
             by_service(root, problems, cands, a.workers, options))]
    lines = [f"{a.n} evaluations (all_reduce copies, half honest, half wrong), W={a.world}, {a.device}, "
             f"timing off, {os.cpu_count()} cores", "", "| how | wall (s) | evaluations / hour |", "|---|---|---|"]
    lines += [f"| {how} | {wall:.1f} | {3600 * a.n / wall:.0f} |" for how, wall in rows]
    per = batch_wall * min(a.workers, a.n) / a.n
    lines += ["", split(done), f"a worker's time per evaluation in the batch: {per:.2f} s (beyond the job's wall: the "
              "evaluation's own work, and {a.workers} jobs of {a.world} ranks sharing {os.cpu_count()} cores)"]
    text = "\n".join(lines)
    print(text)
    shutil.rmtree(root, ignore_errors=True)
    if a.md:
        Path(a.md).write_text(text + "\n")


if __name__ == "__main__":
    main()
