"""The numbers a kernel developer reads in nccl-tests, declared per problem in problem.yaml:

    busbw: all_reduce          # the collective whose bus-bandwidth factor applies (FACTORS), or none
    scale:                     # the size field that scales, in elements (per-size bytes, sweeps)
      field: n
      element_bytes: 2         # optional: the dtype's size
      world: false             # optional: true when nccl-tests' size S is W x field (all_gather's
                               # gathered output: S = sendcount * sizeof(type) * n)
      multiple: 4096           # optional: swept sizes round the field to a multiple of this
      max: 524288              # optional: the largest field value the problem promises (sweeps stop there)

nccl-tests (doc/PERFORMANCE.md): algbw = S / t; busbw = algbw * factor(n), S in bytes, GB/s = 1e9
bytes per second. --kb-sweep=BEGIN:END:FACTOR (nccl-tests' -b/-e/-f) makes sizes of S from BEGIN to
END through the scaled field. No pytest, no torch: spec, metrics, report and cli all read this.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# nccl-tests' correction factor per collective, of the world size n
FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "none": lambda n: 1.0,     # algbw only: no bus figure (a point-to-point or fused workload)
}
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "complex64": 8}


def factor(collective: str, world_size: int) -> float:
    """nccl-tests' busbw / algbw for `collective` over `world_size` ranks (KeyError: not in FACTORS)."""
    return FACTORS[collective](world_size)


@dataclass(frozen=True)
class Scale:
    field: str
    element_bytes: int
    world: bool = False
    multiple: int = 1
    max: int | None = None

    def size_bytes(self, size: dict, world_size: int) -> int | None:
        """nccl-tests' S for one size's config: field x element bytes (x W when `world`); None
        when the config has no such integer field."""
        n = size.get(self.field)
        if not isinstance(n, int) or isinstance(n, bool):
            return None
        return n * self.element_bytes * (world_size if self.world else 1)

    def config_for(self, nbytes: int, world_size: int, base: dict) -> dict:
        """The size config whose S is `nbytes` (rounded down to the field's multiple, at least one
        multiple): `base` (the tiny size's other fields) with the scaled field set."""
        per = self.element_bytes * (world_size if self.world else 1)
        n = max(self.multiple, nbytes // per // self.multiple * self.multiple)
        return {**base, self.field: n}


def algbw(nbytes: float, seconds: float) -> float:
    """GB/s (1e9 bytes), nccl-tests' algbw = S / t."""
    return nbytes / seconds / 1e9


def busbw(nbytes: float, seconds: float, collective: str, world_size: int) -> float:
    """GB/s, nccl-tests' busbw = algbw x the collective's factor."""
    return algbw(nbytes, seconds) * factor(collective, world_size)


class DeclarationError(ValueError):
    """A bad busbw/scale declaration: str() names the field and what is wrong."""


def parse(data: dict, dtype: str, sizes: dict) -> tuple[str | None, Scale | None]:
    """(busbw, scale) from problem.yaml's fields, checked; DeclarationError names the field."""
    collective = data.get("busbw")
    if collective is not None and collective not in FACTORS:
        raise DeclarationError(f"field 'busbw' is {collective!r}; expected one of {', '.join(FACTORS)}")
    raw = data.get("scale")
    if raw is None:
        if collective is not None:
            raise DeclarationError("field 'busbw' needs 'scale: {field: <size field>}' (which size field counts "
                                   "the elements nccl-tests' size S is made of)")
        return None, None
    if not isinstance(raw, dict):
        raise DeclarationError(f"field 'scale' must be a mapping (field, element_bytes, world, multiple), got {raw!r}")
    unknown = sorted(set(raw) - {"field", "element_bytes", "world", "multiple", "max"})
    if unknown:
        raise DeclarationError(f"unknown field 'scale.{unknown[0]}' (known: element_bytes, field, max, multiple, world)")
    name = raw.get("field")
    if not isinstance(name, str) or not name:
        raise DeclarationError(f"field 'scale.field' must name a size field, got {name!r}")
    for size_name, cfg in sizes.items():
        value = cfg.get(name) if isinstance(cfg, dict) else None
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise DeclarationError(f"field 'scale.field' is {name!r}, but 'sizes.{size_name}.{name}' is not a "
                                   f"positive integer ({value!r})")
    eb = raw.get("element_bytes", ELEMENT_BYTES.get(dtype))
    if not isinstance(eb, int) or isinstance(eb, bool) or eb < 1:
        raise DeclarationError(f"field 'scale.element_bytes' must be a positive integer, got {eb!r}")
    world = raw.get("world", False)
    if not isinstance(world, bool):
        raise DeclarationError(f"field 'scale.world' must be true/false, got {world!r}")
    multiple = raw.get("multiple", 1)
    if not isinstance(multiple, int) or isinstance(multiple, bool) or multiple < 1:
        raise DeclarationError(f"field 'scale.multiple' must be a positive integer, got {multiple!r}")
    top = raw.get("max")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or top < multiple):
        raise DeclarationError(f"field 'scale.max' must be an integer >= scale.multiple ({multiple}), got {top!r}")
    return collective, Scale(name, eb, world, multiple, top)


# ---- sweeps: nccl-tests' -b BEGIN -e END -f FACTOR -------------------------------------------------
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text: str) -> int:
    """8K, 256M, 1G, 4096 (binary multiples, as nccl-tests reads -b/-e); ValueError otherwise."""
    t = text.strip().upper().removesuffix("B")
    unit = t[-1:] if t[-1:] in ("K", "M", "G") else ""
    digits = t[:len(t) - len(unit)]
    if not digits.isdigit() or int(digits) < 1:
        raise ValueError(f"{text!r}: expected a size in bytes such as 8K, 256M, 1G or 4096")
    return int(digits) * _SUFFIX[unit]


def parse_sweep(text: str) -> tuple[int, int, int]:
    """BEGIN:END:FACTOR (FACTOR defaults to 2) -> bytes, bytes, factor; ValueError says what is wrong."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"{text!r}: expected BEGIN:END:FACTOR, e.g. 8K:256M:2")
    begin, end = parse_bytes(parts[0]), parse_bytes(parts[1])
    if end < begin:
        raise ValueError(f"{text!r}: END is smaller than BEGIN")
    try:
        step = int(parts[2]) if len(parts) == 3 else 2
    except ValueError:
        raise ValueError(f"{text!r}: FACTOR must be an integer >= 2") from None
    if step < 2:
        raise ValueError(f"{text!r}: FACTOR must be an integer >= 2")
    return begin, end, step


def sweep_bytes(begin: int, end: int, step: int) -> list[int]:
    """begin, begin x step, ... up to end (nccl-tests' -f): the sizes S of a sweep."""
    out, n = [], begin
    while n <= end:
        out.append(n)
        n *= step
    return out


def size_name(nbytes: int) -> str:
    """A swept size's name: its S as nccl-tests spells -b/-e (8K, 256M), else the bytes."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def sweep_configs(scale: Scale, base: dict, world_size: int, sweep: tuple[int, int, int]) -> dict[str, dict]:
    """name -> size config for each S of the sweep, the scaled field rounded to its multiple (two
    S that round to one config run once), past the field's max left out (the problem promises no more)."""
    out: dict[str, dict] = {}
    for nbytes in sweep_bytes(*sweep):
        cfg = scale.config_for(nbytes, world_size, base)
        if scale.max is not None and cfg[scale.field] > scale.max:
            continue
        name = size_name(scale.size_bytes(cfg, world_size) or nbytes)
        out.setdefault(name, cfg)
    return out
