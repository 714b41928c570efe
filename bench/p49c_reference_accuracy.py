"""Issue 49 (5, 6, 13) on ONE GPU: each new problem's reference at W ranks sharing the GPU (gloo; the
point-to-point messages staged through host memory, which the harness does not do yet), against the
float64 kernels of tests/test_problems_p49c.py. Prints, per rank, max |ref - exact| / (rms + |exact|)
per output (the problems' tolerances: 0.05 for the backward, 0.02 for the others) and the
reference's wall time (not a benchmark: ranks share the GPU).

    python bench/p49c_reference_accuracy.py p2p/zigzag_ring_attention_backward:small:2 ...
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml

REPO = Path(__file__).resolve().parent.parent


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def staged_batch(ops):
    """batch_isend_irecv through host memory (gloo sends no CUDA tensor point to point); all sends
    first, then the receives: every rank of a ring posts one of each."""
    for op in ops:
        if op.op is dist.isend:
            dist.send(op.tensor.cpu(), op.peer)
    for op in ops:
        if op.op is dist.irecv:
            buf = torch.empty(op.tensor.shape, dtype=op.tensor.dtype)
            dist.recv(buf, op.peer)
            op.tensor.copy_(buf)
    return []


def worker(rank, world, pid, size, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    dist.batch_isend_irecv = staged_batch
    folder = REPO / "problems" / pid
    spec = yaml.safe_load((folder / "problem.yaml").read_text())
    harness, ref = load(folder / "harness.py", "h"), load(folder / "reference.py", "r")
    src = _exact_sources()[pid]
    ns: dict = {}
    exec(compile(src, f"exact:{pid}", "exec"), ns)
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(100 + rank)
    extra = {"shared_seed": 12345} if "shared_seed" in harness.inputs.__code__.co_varnames else {}
    ins = harness.inputs(spec["sizes"][size], rank, world, gen, device, torch.bfloat16, **extra)
    t0 = time.perf_counter()
    got = ref.solution(*ins)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    want = ns["solution"](*[t.cpu() for t in ins])
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    errs = []
    for g, w in zip(got, want):
        g, w = g.float().cpu(), w.float()
        errs.append(round(((g - w).abs() / (w.pow(2).mean().sqrt() + w.abs())).max().item(), 4))
    queue.put((rank, errs, round(wall, 3)))
    dist.destroy_process_group()


def _exact_sources() -> dict:
    sys.path.insert(0, str(REPO / "tests"))
    return load(REPO / "tests" / "test_problems_p49c.py", "_p49c").EXACT


def main(args: list[str]) -> None:
    for n, arg in enumerate(args):
        pid, size, world = arg.split(":")
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(r, int(world), pid, size, 29100 + n, queue)) for r in range(int(world))]
        for p in procs:
            p.start()
        try:
            res = sorted(queue.get(timeout=300) for _ in procs)
        except Exception as e:  # a rank died: its traceback is on stderr
            res = [f"FAILED: {type(e).__name__}"]
        for p in procs:
            p.join(5)
        print(pid, size, f"W={world}", res, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
