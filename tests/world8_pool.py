"""Every problem's reference at W ranks on CPU (gloo) in ONE job:
`python world8_pool.py OUT W ROOT ID...` (ROOT: a problems/ tree; ID: <category>/<name> in it).

The ranks are forked once from this process (torch imported once), join one gloo process group
once, then run every problem in turn, in the same order on every rank (so subgroups a reference
creates with dist.new_group line up). For each problem, like the plugin's worker does with the
reference as candidate: load harness and reference from the folder (importlib, unregistered),
cost() of every size at W, inputs of size tiny seeded per rank from a torch.Generator, the
reference called twice on clones of the same inputs and the second result checked against the
first (structure, then harness.check or the tolerance; inputs untouched or, in-place, the same;
no output aliasing an input), outputs finite (where the harness has no check() of its own: that
one says which parts count, padding may be left unset), and a digest of each rank's inputs.

Rank 0 appends one JSON line per problem to OUT/results.jsonl: {"problem", "ranks": [per rank]}.
A rank that fails writes OUT/error-rank<R>.txt and exits; the parent then stops the others. Exit
status 0 only when every problem ran on every rank.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import socket
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402  (after OMP_NUM_THREADS)

NONCE = "world8-pool"
PG_TIMEOUT_S = 60.0


def _digest(obj) -> str:
    from pytest_kernelbench.rank.compare import leaves
    h = hashlib.sha256()
    for path, v in leaves(obj, "in"):
        h.update(path.encode())
        if isinstance(v, torch.Tensor):
            t = v.detach().contiguous().cpu()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(v).encode())
    return h.hexdigest()[:16]


def _not_finite(obj) -> str | None:
    from pytest_kernelbench.rank.compare import leaves
    for path, v in leaves(obj):
        if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex()) and v.numel():
            if not bool(torch.isfinite(v.float() if v.element_size() == 1 else v).all()):   # fp8: no isfinite
                return path
        elif isinstance(v, float) and not math.isfinite(v):
            return path
    return None


def one_problem(root: Path, problem_id: str, rank: int, world: int) -> dict:
    from pytest_kernelbench.rank import compare
    from pytest_kernelbench.rank.files import load_module
    from pytest_kernelbench.spec.problem import TINY, load_problem
    t0 = time.perf_counter()
    p = load_problem(root / problem_id / "problem.yaml", root)
    dtype, device, tol = getattr(torch, p.dtype), torch.device("cpu"), dict(p.tolerance)
    tag = os.urandom(6).hex()
    harness = load_module(str(p.harness_path), f"_w8_h_{tag}", register=False)
    reference = load_module(str(p.reference_path), f"_w8_r_{tag}", register=False)
    link = {name: float(harness.cost(cfg, world, dtype)["link_bytes"]) for name, cfg in p.sizes.items()}
    key = f"{NONCE}|{problem_id}|{TINY}|trial0|{rank}"
    gen = torch.Generator(device=device)
    gen.manual_seed(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & ((1 << 63) - 1))
    inputs = harness.inputs(p.sizes[TINY], rank, world, gen, device, dtype)
    pristine = compare.clone(inputs)
    first_in = compare.clone(pristine)
    first = reference.solution(*first_in)
    second_in = compare.clone(pristine)
    second = reference.solution(*second_in)
    # the plugin's check of a candidate (here the second run) against the reference (the first)
    msg = compare.structure(second, first)
    if msg is None and hasattr(harness, "check"):
        try:
            harness.check(second, first, second_in, tol)
        except AssertionError as e:
            msg = f"harness.check: {e}"
    elif msg is None:
        msg, _ = compare.values(second, first, tol)
    if msg is None and p.inplace:
        msg, _ = compare.values(second_in, first_in, tol, "input")
    elif msg is None:
        msg = compare.unchanged(second_in, pristine) or compare.unchanged(first_in, pristine) \
            or compare.aliasing(second, second_in)
    # outputs finite, unless harness.check says which parts count (padding may be left unset)
    not_finite = None if hasattr(harness, "check") else _not_finite(first)
    return {"rank": rank, "mismatch": msg, "not_finite": not_finite, "link_bytes": link,
            "inputs": _digest(pristine), "leaves": sum(1 for _ in compare.leaves(first)), "s": time.perf_counter() - t0}


def rank_main(rank: int, world: int, port: int, out: str, root: Path, problems: list[str]):
    import warnings

    import torch.distributed as dist
    warnings.filterwarnings("ignore", category=FutureWarning)     # deprecated collective names
    torch.set_num_threads(1)
    try:
        store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0,
                              timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
        for pid in problems:
            where = pid
            mine = one_problem(root, pid, rank, world)
            where = f"{pid} (gathering the ranks' records)"
            everyone = [None] * world
            dist.all_gather_object(everyone, mine)
            if rank == 0:
                with open(os.path.join(out, "results.jsonl"), "a") as f:
                    f.write(json.dumps({"problem": pid, "ranks": everyone}) + "\n")
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - report any failure, then leave at once
        where = locals().get("where", "process group setup")
        with open(os.path.join(out, f"error-rank{rank}.txt"), "w") as f:
            f.write(f"rank {rank}, {where}: {type(e).__name__}: {e}\n{traceback.format_exc()[-4000:]}")
        os._exit(1)
    os._exit(0)


def main(out: str, world: int, root: Path, problems: list[str]) -> int:
    import multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")      # torch is imported once, here; no thread of it runs yet
    procs = [ctx.Process(target=rank_main, args=(r, world, port, out, root, problems), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    status = 0
    while any(p.is_alive() for p in procs):
        failed = [p for p in procs if p.exitcode not in (None, 0)]
        if failed:        # one rank gave up: its peers would wait in a collective until the timeout
            time.sleep(1.0)
            for p in procs:
                if p.is_alive():
                    p.kill()
            break
        time.sleep(0.05)
    for p in procs:
        p.join()
        status = status or (p.exitcode != 0)
    return int(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]).resolve(), sys.argv[4:]))
