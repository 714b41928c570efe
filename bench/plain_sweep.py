"""A problem's reference timed the nccl-tests way, per size of a sweep, for checking the harness's
per-size reference times (--kb-sweep --kb-per-size) against plain code:

    torchrun --standalone --nproc-per-node W bench/plain_sweep.py PROBLEM_DIR 8K:256M:2 [OUT.json]

The same torch call as the harness times (the problem's reference.py solution() on the harness's
inputs), CUDA events around ITERS back-to-back calls, 5 warm-up calls, 15 rounds, max over ranks
per round, median over rounds. Two variants per size:
  plain   one input set, called again and again (what nccl-tests does: warm caches at small S)
  fresh   cycling over input sets worth 2 x L2 (at most 2048 sets), L2 flushed before each round,
          as the harness's timed windows do
Prints (rank 0) one JSON object: {"world_size", "sizes": [{name, bytes, plain_s, fresh_s, ...}]}.
KB_PLAIN_CPU=1: gloo on the CPU, wall clock instead of events (a dry run of the script's logic).
"""
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pytest_kernelbench.spec.bandwidth import parse_sweep, sweep_configs  # noqa: E402
from pytest_kernelbench.spec.problem import load_problem  # noqa: E402

DEVICE = None
ROUNDS, WARMUP, ROUND_S = 15, 5, 2e-3      # a round lasts at least ~2 ms (events resolve ~us)
CPU = os.environ.get("KB_PLAIN_CPU") == "1"


class _Clock:
    """CUDA events on a GPU; on the CPU (dry run) the wall clock."""

    def __init__(self):
        self.ev = None if CPU else (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))

    def start(self):
        if self.ev:
            self.ev[0].record()
        else:
            self.t = time.perf_counter()

    def stop(self) -> float:
        """Seconds since start()."""
        if self.ev:
            self.ev[1].record()
            self.ev[1].synchronize()
            return self.ev[0].elapsed_time(self.ev[1]) / 1000
        return time.perf_counter() - self.t


def _sync():
    if not CPU:
        torch.cuda.synchronize()


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _time(fn, sets, iters, flush) -> list[float]:
    for i in range(WARMUP):
        fn(*sets[i % len(sets)])
    _sync()
    rounds = []
    for _ in range(ROUNDS):
        if flush is not None:
            flush.zero_()
        dist.barrier()
        _sync()
        clock = _Clock()
        clock.start()
        for i in range(iters):
            fn(*sets[i % len(sets)])
        t = torch.tensor([clock.stop() / iters], device=DEVICE)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)       # the job's time: the slowest rank's
        rounds.append(t.item())
    return rounds


def main():
    folder, sweep = Path(sys.argv[1]), parse_sweep(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    global DEVICE
    if CPU:
        DEVICE = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        DEVICE = torch.device("cuda", local)
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=DEVICE)
    problem = load_problem(folder / "problem.yaml", folder.parent.parent)
    dtype = getattr(torch, problem.dtype)
    ref = _module(problem.reference_path, "plain_reference").solution
    harness = _module(problem.harness_path, "plain_harness")
    base = {k: v for k, v in problem.sizes["tiny"].items() if k != problem.scale.field}
    l2 = 0 if CPU else int(getattr(torch.cuda.get_device_properties(local), "L2_cache_size", 0) or 0)
    flush = torch.empty(2 * l2, dtype=torch.uint8, device=DEVICE) if l2 else None
    out = {"problem": problem.id, "world_size": world, "sweep": sys.argv[2], "sizes": []}
    for name, cfg in sweep_configs(problem.scale, base, world, sweep).items():
        nbytes = problem.scale.size_bytes(cfg, world)
        gen = torch.Generator(device=DEVICE).manual_seed(1000 + rank)
        one = [harness.inputs(cfg, rank, world, gen, DEVICE, dtype)]
        fresh = [harness.inputs(cfg, rank, world, gen, DEVICE, dtype)
                 for _ in range(max(2, min(2048, -(-2 * l2 // max(nbytes, 1)))))]
        # calls per round: a first guess from one timed call, the same on every rank
        ref(*one[0])
        _sync()
        clock = _Clock()
        clock.start()
        ref(*one[0])
        guess = torch.tensor([clock.stop()], device=DEVICE)
        dist.all_reduce(guess, op=dist.ReduceOp.MAX)
        iters = int(max(4, min(2000, ROUND_S / max(guess.item(), 1e-7))))
        plain = _time(ref, one, iters, None)
        cycled = _time(ref, fresh, iters, flush)
        out["sizes"].append({"name": name, "bytes": nbytes, "iters": iters, "sets": len(fresh),
                             "plain_s": statistics.median(plain), "fresh_s": statistics.median(cycled),
                             "plain_rounds_s": plain, "fresh_rounds_s": cycled})
        del fresh, one
    if rank == 0:
        text = json.dumps(out)
        print(text)
        if len(sys.argv) > 3:
            Path(sys.argv[3]).write_text(text)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
