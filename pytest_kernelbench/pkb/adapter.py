"""Inside a rank: the harness (inputs, cost) of one ParallelKernelBench problem, built at run time
from the user's PKB checkout. A PKB item's generated harness.py is two lines that call harness().

inputs() runs PKB's own generator, `create_input_tensor(rank, world_size, problem_id, (M, N),
dtype, trial, device)` from utils/input_output_tensors.py, with three changes that keep its
structure and take away what a candidate could know in advance:
- seeds: PKB seeds the global RNG with fixed numbers (42 + 1000 * problem + rank + ..., or a rank-
  free seed for data all ranks share). Every such seed is mixed with the run's secret shared seed,
  so ranks that share a PKB seed still draw the same values, but the values are new every run;
- a generator that never seeds (PKB's collectives fill rank + 1) gets its floating-point tensors
  refilled from the item's per-rank generator, with values whose sums are exact in bfloat16;
- process groups the generator creates are created once per rank list and reused, since the
  harness calls inputs() many times and not always on every rank.
The global RNG state is restored after each call, so nothing about the seeds leaks to candidates.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, SupportsInt

import torch
import torch.distributed as dist

from ..harnesslib import exact_values
from .taxonomy import COSTS

SHIM = str(Path(__file__).resolve().parent / "shim")
GENERATOR = Path("utils") / "input_output_tensors.py"


def mix(base: int, seed: object) -> int:
    digest = hashlib.sha256(f"{base}|{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class SeededTorch:
    """torch as PKB's generator sees it: every attribute is torch's own, except manual_seed, which
    seeds with PKB's seed mixed with `base` and counts the calls."""

    def __init__(self, mixer: Callable[[int, object], int]) -> None:
        self.base = 0
        self.calls = 0
        self._mix = mixer

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def manual_seed(self, seed: SupportsInt) -> torch.Generator:
        self.calls += 1
        return torch.manual_seed(self._mix(self.base, int(seed)))


class CachedGroups:
    """torch.distributed as PKB's generator sees it: new_group() makes each group once (the first
    inputs() call runs on every rank; later ones, e.g. refilling some ranks' buffers, reuse it)."""

    def __init__(self):
        self.groups: dict[str, object] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(dist, name)

    def new_group(self, ranks: Iterable[int] | None = None, *args: Any, **kwargs: Any) -> object:
        key = repr((None if ranks is None else list(ranks), args, sorted(kwargs.items())))
        if key not in self.groups:
            self.groups[key] = dist.new_group(ranks, *args, **kwargs)
        return self.groups[key]


def load_generator(checkout: str):
    """PKB's generator module, private to this harness (not importable by name afterwards)."""
    path = Path(checkout) / GENERATOR
    name = f"_kb_pkb_generator_{os.urandom(4).hex()}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module      # a dataclass defined there looks its module up while being made
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    module.torch = SeededTorch(mix)
    module.dist = CachedGroups()
    return module


def fresh_values(args: Any, gen: torch.Generator) -> Any:
    """Floating-point tensors of `args` (top level and inside lists/tuples) refilled from `gen`
    (or, for a tensor on another device, a generator there seeded from it)."""
    gens = {gen.device: gen}

    def fill(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            if not obj.is_floating_point() or obj.device.type == "meta":
                return obj
            if obj.device not in gens:
                gens[obj.device] = torch.Generator(device=obj.device).manual_seed(mix(gen.initial_seed(), obj.device))
            return exact_values(tuple(obj.shape), gens[obj.device], obj.device, obj.dtype)
        if isinstance(obj, (list, tuple)):
            items = [fill(a) for a in obj]
            return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)     # namedtuples too
        return obj
    return fill(args)


def harness(checkout: str, problem_id: int, cost_model: str | None = None):
    """(inputs, cost) for PKB problem `problem_id`; also puts our `utils` shim on the import path
    (this runs when the rank loads the harness, before the reference and the candidate)."""
    if SHIM not in sys.path:
        sys.path.insert(0, SHIM)
    generator = load_generator(checkout)
    create, seeded, mixer = generator.create_input_tensor, generator.torch, mix   # bound now: later patches miss

    def inputs(size: dict, rank: int, world_size: int, gen: torch.Generator, device: str | torch.device,
               dtype: torch.dtype, shared_seed: int | None = None) -> tuple:
        own, device = gen.initial_seed(), torch.device(device)
        seeded.base, seeded.calls = (own if shared_seed is None else shared_seed), 0
        cuda = [device.index if device.index is not None else torch.cuda.current_device()] \
            if device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(mixer(own, "unseeded"))    # draws made before any PKB seed are ours too
            # trial 0 always: PKB's trial only moves its seeds (replaced here) and a few scalars,
            # which must stay the same across the harness's refills of one input set
            args = create(rank, world_size, problem_id, (int(size["m"]), int(size["n"])), dtype, trial=0,
                          device=device)
        if not seeded.calls:
            args = fresh_values(args, gen)
        return tuple(args)

    def cost(size: dict, world_size: int, dtype: torch.dtype) -> dict:
        model = COSTS.get(cost_model)
        if model is None:
            return {}      # no roofline rather than a wrong one
        n = int(size["m"]) * int(size["n"])
        return model(n * torch.tensor([], dtype=dtype).element_size(), n, world_size)

    return inputs, cost
