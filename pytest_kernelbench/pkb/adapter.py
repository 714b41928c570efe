"""Inside a rank: the harness (inputs, cost) of one ParallelKernelBench problem, built at run time
from the user's PKB checkout. A PKB item's generated harness.py is two lines that call harness().

inputs() runs PKB's own generator, `create_input_tensor(rank, world_size, problem_id, (M, N),
dtype, trial, device)` from utils/input_output_tensors.py, with changes that keep its structure
and take away what a candidate could know in advance:
- seeds: PKB seeds the global RNG with fixed numbers (42 + 1000 * problem + rank + ..., or a rank-
  free seed for data all ranks share). Each random draw the generator makes through `torch.<fn>`
  (randn, randint, randperm, ...) is seeded by the PKB seed before it, its place after that seed
  and the run's secret shared seed, so ranks that share a PKB seed still draw the same values, but
  the values are new every run (draws torch makes for it, e.g. nn.Linear's init, follow the same
  secret stream);
- shapes that depend on the seed (PKB's 70 draws `lengths` and sizes `values` by their sum): the
  harness refills its timing buffers in place, so every call for one size and rank must give the
  same shapes. The first call of a size finds the draws that decide shapes (drawing twice with
  new seeds; if the shapes move, each draw in turn) and pins those to a seed fixed for the run,
  size and rank; every other draw stays fresh, so refills still bring new values;
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
from types import ModuleType
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


# torch functions that draw from the global RNG: each call is a draw the adapter seeds itself
DRAWS = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal",
                   "bernoulli", "multinomial", "poisson"})


class SeededTorch:
    """torch as PKB's generator sees it: every attribute is torch's own, except manual_seed (PKB's
    seed is remembered and counted, not used as is) and the draws of DRAWS, each seeded from
    (`base`, the PKB seed before it, its place after that seed), or from `pinned_base` for the
    draws in `pinned` (those that decide shapes)."""

    def __init__(self, mixer: Callable[[int, object], int]) -> None:
        self._mix = mixer
        self.start(0, 0)

    def start(self, base: int, own: int, pinned: frozenset = frozenset(), pinned_base: int = 0,
              pinned_own: int = 0) -> None:
        """Before a create_input_tensor() call: the seeds of this call."""
        self.base, self.own, self.pinned, self.pinned_base, self.pinned_own = base, own, pinned, pinned_base, pinned_own
        self.calls, self.index = 0, 0
        self.seed: int | None = None     # PKB's last manual_seed()
        self.keys: list[tuple] = []      # the draws made, in order

    def __getattr__(self, name: str) -> Any:
        attr = getattr(torch, name)
        return self._draw(attr) if name in DRAWS else attr

    def manual_seed(self, seed: SupportsInt) -> torch.Generator:
        self.calls += 1
        self.seed, self.index = int(seed), 0
        return torch.manual_seed(self._mix(self.base, self.seed))

    def _draw(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def draw(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("generator") is not None:
                return fn(*args, **kwargs)
            key = (self.seed, self.index)
            self.index += 1
            self.keys.append(key)
            # before any PKB seed a draw is this rank's own; after one, it follows the seed's sharing
            fresh = self.base if self.seed is not None else self.own
            pinned = self.pinned_base if self.seed is not None else self.pinned_own
            torch.manual_seed(self._mix(pinned if key in self.pinned else fresh, key))
            try:
                return fn(*args, **kwargs)
            finally:        # what torch draws next on its own (an nn.Linear's init) stays fresh
                torch.manual_seed(self._mix(fresh, (*key, "after")))
        return draw


class CachedGroups:
    """torch.distributed as PKB's generator sees it: new_group() makes each group once (the first
    inputs() call runs on every rank; later ones, e.g. refilling some ranks' buffers, reuse it)."""

    def __init__(self) -> None:
        self.groups: dict[str, object] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(dist, name)

    def new_group(self, ranks: Iterable[int] | None = None, *args: Any, **kwargs: Any) -> object:
        key = repr((None if ranks is None else list(ranks), args, sorted(kwargs.items())))
        if key not in self.groups:
            self.groups[key] = dist.new_group(ranks, *args, **kwargs)
        return self.groups[key]


def load_generator(checkout: str) -> ModuleType:
    """PKB's generator module, private to this harness (not importable by name afterwards)."""
    path = Path(checkout) / GENERATOR
    name = f"_kb_pkb_generator_{os.urandom(4).hex()}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load PKB's generator {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module      # a dataclass defined there looks its module up while being made
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    # the generator's own globals, replaced: seeded draws, one group per rank list
    setattr(module, "torch", SeededTorch(mix))  # noqa: B010
    setattr(module, "dist", CachedGroups())  # noqa: B010
    return module


def fresh_values(args: Any, gen: torch.Generator) -> Any:
    """Floating-point tensors of `args` (top level and inside lists/tuples) refilled from `gen`
    (or, for a tensor on another device, a generator there seeded from it); a sparse tensor keeps
    its indices and gets new values."""
    gens = {gen.device: gen}

    def fill(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            if not obj.is_floating_point() or obj.device.type == "meta":
                return obj
            if obj.device not in gens:
                gens[obj.device] = torch.Generator(device=obj.device).manual_seed(mix(gen.initial_seed(), obj.device))
            if obj.layout == torch.sparse_coo:
                values = exact_values(tuple(obj._values().shape), gens[obj.device], obj.device, obj.dtype)
                return torch.sparse_coo_tensor(obj._indices(), values, obj.shape, is_coalesced=obj.is_coalesced())
            if obj.layout != torch.strided:
                return obj
            return exact_values(tuple(obj.shape), gens[obj.device], obj.device, obj.dtype)
        if isinstance(obj, (list, tuple)):
            items = [fill(a) for a in obj]
            return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)     # namedtuples too
        return obj
    return fill(args)


def shapes(obj: Any) -> Any:
    """What must stay the same across refills of one input set: every tensor's shape, dtype and
    layout (and a sparse tensor's stored count), in the structure's order."""
    if isinstance(obj, torch.Tensor):
        nnz = obj._nnz() if obj.layout in (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr,
                                          torch.sparse_bsc) else None
        return ("tensor", tuple(obj.shape), obj.dtype, obj.layout, nnz)
    if isinstance(obj, (list, tuple)):
        return tuple(shapes(v) for v in obj)
    if isinstance(obj, dict):
        return tuple((k, shapes(v)) for k, v in obj.items())
    return None


PROBES = 4      # fresh draws that must all keep the shapes before a draw counts as not deciding them


class ShapeError(RuntimeError):
    """The generator's shapes move with draws the adapter cannot pin."""


def harness(checkout: str, problem_id: int, cost_model: str | None = None):
    """(inputs, cost) for PKB problem `problem_id`; also puts our `utils` shim on the import path
    (this runs when the rank loads the harness, before the reference and the candidate)."""
    if SHIM not in sys.path:
        sys.path.insert(0, SHIM)
    generator = load_generator(checkout)
    create, seeded, mixer = generator.create_input_tensor, generator.torch, mix   # bound now: later patches miss
    # per (size, dtype, device): the pinned seeds (the first call's) and the draws they pin
    pins: dict[tuple, tuple[int, int, frozenset]] = {}

    def draw(rank: int, world_size: int, size: tuple[int, int], device: torch.device, dtype: torch.dtype,
             base: int, own: int, pin: tuple[int, int, frozenset] | None) -> Any:
        pinned_base, pinned_own, pinned = pin or (0, 0, frozenset())
        seeded.start(base, own, pinned, pinned_base, pinned_own)
        cuda = [device.index if device.index is not None else torch.cuda.current_device()] \
            if device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(mixer(own, "unseeded"))    # draws torch makes before any PKB seed are ours too
            # trial 0 always: PKB's trial only moves its seeds (replaced here) and a few scalars,
            # which must stay the same across the harness's refills of one input set
            return create(rank, world_size, problem_id, size, dtype, trial=0, device=device)

    def learn(rank: int, world_size: int, size: tuple[int, int], device: torch.device, dtype: torch.dtype,
              base: int, own: int, first: Any) -> tuple[int, int, frozenset]:
        """The draws whose values decide shapes, pinned to this (first) call's seeds."""
        keys = list(seeded.keys)
        probe = 0

        def shapes_with(pinned: frozenset) -> Any:
            nonlocal probe
            probe += 1
            return shapes(draw(rank, world_size, size, device, dtype, mixer(base, ("probe", probe)),
                               mixer(own, ("probe", probe)), (base, own, pinned)))
        want = shapes(first)

        def stable(pinned: frozenset) -> bool:
            # new draws may give the same shapes by chance (two sums of random lengths can be equal):
            # shapes count as independent of the unpinned draws only if PROBES fresh draws all agree
            return all(shapes_with(pinned) == want for _ in range(PROBES))
        if not keys or stable(frozenset()):
            return base, own, frozenset()
        pinned = set(keys)
        if not stable(frozenset(pinned)):
            raise ShapeError(f"PKB problem {problem_id}: the shapes of create_input_tensor() change with draws "
                             "the adapter cannot seed, so its inputs cannot be refilled in place")
        for key in keys:                       # unpin each draw whose values do not move shapes
            if stable(frozenset(pinned - {key})):
                pinned.discard(key)
        return base, own, frozenset(pinned)

    def inputs(size: dict, rank: int, world_size: int, gen: torch.Generator, device: str | torch.device,
               dtype: torch.dtype, shared_seed: int | None = None) -> tuple:
        own, device = gen.initial_seed(), torch.device(device)
        base = own if shared_seed is None else shared_seed
        mn = (int(size["m"]), int(size["n"]))
        key = (mn, world_size, rank, str(dtype), str(device))
        if key not in pins:      # the first call of this size: its seeds become the pinned ones (so its
            args = draw(rank, world_size, mn, device, dtype, base, own, None)        # draws are already those)
            pins[key] = learn(rank, world_size, mn, device, dtype, base, own, args)
        else:
            args = draw(rank, world_size, mn, device, dtype, base, own, pins[key])
        if not seeded.calls:
            args = fresh_values(args, gen)
        return tuple(args)

    def cost(size: dict, world_size: int, dtype: torch.dtype) -> dict:
        model = COSTS.get(cost_model) if cost_model else None
        if model is None:
            return {}      # no roofline rather than a wrong one
        n = int(size["m"]) * int(size["n"])
        return model(n * torch.tensor([], dtype=dtype).element_size(), n, world_size)

    return inputs, cost
