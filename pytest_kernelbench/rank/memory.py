"""Memory that crosses the checker/candidate boundary, and the trees that describe inputs.

- Inputs live in arenas the checker owns (CPU: a memfd both processes map; CUDA: a cuMemAlloc
  allocation shared by IPC handle, so it holds nothing but input sets). The checker writes the
  values and reads them back afterwards (unchanged inputs, in-place results) from its own mapping.
- Outputs live in the candidate's own memory. The candidate process describes them (pointer,
  shape, stride, dtype); the checker reads the bytes itself: on CPU through /proc/<pid>/mem, on
  CUDA through the candidate's allocations opened by IPC handle (each allocation once). What the
  description claims is never trusted beyond where to look: the bytes read are the verdict
  (rank/outputs.py describes and reads them; the readers are here).
"""
from __future__ import annotations

import bisect
import mmap
import os
from collections.abc import Iterator
from typing import Any

import torch

from ..protocol import Arena as ArenaMsg
from . import objects
from .cuda import Driver, bytes_tensor

ALIGN = 256
VALUE_TYPES = (int, float, bool, str, type(None))
# bounds on what a solver process describes (rank/untrusted.py reads the rest of what it says)
ADDRESS_END = 1 << 63        # no process's memory lies at or past this (and pread's offset is signed)
MAX_DIMS = 64                # torch's own limit on a tensor's dimensions
MAX_READ_BYTES = 1 << 36     # one tensor the checker reads (and copies): 64 GiB


class MemoryError_(objects.LendError):
    """An output the checker cannot read (not the candidate's own memory, or a layout it refuses)."""


def dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def dtype_of(name: str) -> torch.dtype:
    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise MemoryError_(f"not a dtype: {name!r}")
    return dt


def span(shape: list[int], stride: list[int], itemsize: int) -> int:
    """Bytes from a strided view's first element to the end of its last."""
    if any(s == 0 for s in shape):
        return 0
    if any(st < 0 for st in stride):
        raise MemoryError_("negative strides")
    return itemsize * (1 + sum((n - 1) * st for n, st in zip(shape, stride)))


def pointer_ok(p: object, n: object) -> None:
    """`n` bytes at `p` could be a process's memory and are few enough to read; MemoryError_ if not."""
    if type(p) is not int or type(n) is not int or p < 0 or n < 0 or p + n > ADDRESS_END:
        raise MemoryError_(f"{n!r} bytes at {p!r} are out of any process's memory")
    if n > MAX_READ_BYTES:
        raise MemoryError_(f"an output of {n} bytes (the checker reads at most {MAX_READ_BYTES})")


def shape_ok(shape: list, stride: list, itemsize: int) -> None:
    """A tensor the checker may rebuild: few dimensions, and as many elements as it may copy."""
    if len(shape) > MAX_DIMS or len(shape) != len(stride):
        raise MemoryError_("a tensor of too many dimensions")
    if any(type(v) is not int or v < 0 for v in (*shape, *stride)):
        raise MemoryError_("a tensor's shape or strides are not counts")
    numel = 1
    for s in shape:
        numel *= s
        if numel * itemsize > MAX_READ_BYTES:
            raise MemoryError_(f"a tensor of more than {MAX_READ_BYTES} bytes")
    if any(st >= ADDRESS_END for st in stride):
        raise MemoryError_("strides out of bounds")


def contiguous_stride(shape: list[int]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return list(reversed(out))


# ---- arenas: the checker's input memory, mapped by its candidate -----------------------------------
class Arena:
    """Checker side: memory it owns, lends to its candidate, and reads back."""

    def __init__(self, ident: int, device: torch.device, nbytes: int, driver: Driver | None = None):
        self.id, self.device, self.nbytes = ident, device, max(ALIGN, nbytes)
        self.driver, self.fd, self.mem, self.ptr = driver, -1, None, 0
        if device.type == "cuda":
            assert driver is not None
            self.ptr = driver.alloc(self.nbytes)
            self.base = bytes_tensor(self.ptr, self.nbytes, device)
        else:
            self.fd = os.memfd_create(f"kb-arena-{ident}", 0)
            os.ftruncate(self.fd, self.nbytes)
            self.mem = mmap.mmap(self.fd, self.nbytes)
            self.base = torch.frombuffer(self.mem, dtype=torch.uint8)

    def view(self, off: int, shape: list[int], stride: list[int], dtype: torch.dtype) -> torch.Tensor:
        item = torch.empty(0, dtype=dtype).element_size()
        n = max(span(shape, stride, item), item)
        return self.base[off:off + n].view(dtype).as_strided(shape, stride)

    def message(self) -> tuple[ArenaMsg, tuple[int, ...]]:
        if self.device.type == "cuda":
            assert self.driver is not None
            return ArenaMsg(self.id, "cuda", self.nbytes, self.driver.ipc_handle(self.ptr).hex()), ()
        return ArenaMsg(self.id, "cpu", self.nbytes), (self.fd,)

    def close(self) -> None:
        del self.base
        if self.mem is not None:
            self.mem.close()
            os.close(self.fd)
        elif self.driver is not None and self.ptr:
            self.driver.free(self.ptr)


class Mapped:
    """Candidate side: an arena it was lent."""

    def __init__(self, msg: ArenaMsg, fds: list[int], device: torch.device, driver: Driver | None):
        self.id, self.device, self.nbytes = msg.id, device, msg.nbytes
        if msg.device == "cuda":
            assert driver is not None
            self.ptr = driver.ipc_open(bytes.fromhex(msg.handle))
            self.base = bytes_tensor(self.ptr, self.nbytes, device)
        else:
            self.mem = mmap.mmap(fds[0], self.nbytes)
            os.close(fds[0])
            self.base = torch.frombuffer(self.mem, dtype=torch.uint8)

    view = Arena.view


# ---- inputs ------------------------------------------------------------------------------------------
def layout(obj: Any, arenas: dict[str, int], ends: dict[str, int]) -> tuple[dict, list[tuple[dict, torch.Tensor]]]:
    """(tree, [(leaf, value)]) of one input set placed in the arenas (one per device type: a CUDA
    problem's inputs may hold CPU tensors too), each from its end in `ends` (advanced here). The
    values are not copied here."""
    leaves: list[tuple[dict, torch.Tensor]] = []

    def walk(o: Any) -> dict:
        if isinstance(o, torch.Tensor):
            if o.layout == torch.sparse_coo:
                o = o.coalesce()
                return {"t": "S", "i": walk(o.indices()), "v": walk(o.values()), "size": list(o.shape)}
            if o.layout != torch.strided:
                raise MemoryError_(f"an input of layout {o.layout} cannot be lent to the candidate")
            shape, kind = list(o.shape), o.device.type
            leaf = {"t": "T", "a": arenas[kind], "o": ends[kind], "s": shape, "st": contiguous_stride(shape),
                    "d": dtype_name(o.dtype)}
            ends[kind] += -(-max(o.numel() * o.element_size(), 1) // ALIGN) * ALIGN
            leaves.append((leaf, o))
            return leaf
        if isinstance(o, (list, tuple)):
            return {"t": "L" if isinstance(o, list) else "U", "x": [walk(v) for v in o]}
        if isinstance(o, dict):
            return {"t": "D", "x": [[k, walk(v)] for k, v in o.items()]}
        if isinstance(o, VALUE_TYPES):
            return {"t": "V", "v": o}
        group = objects.group_leaf(o)
        if group is not None:
            return group
        return objects.pickled(o, walk)

    tree = walk(obj)
    return tree, leaves


def build(tree: dict, arenas: dict[int, Any]) -> Any:
    """The object a tree describes, its tensors views of the arenas (candidate side, and the
    checker's own view of what it lent)."""
    t = tree["t"]
    if t == "T":
        return arenas[tree["a"]].view(int(tree["o"]), tree["s"], tree["st"], dtype_of(tree["d"]))
    if t == "S":
        return torch.sparse_coo_tensor(build(tree["i"], arenas), build(tree["v"], arenas), tree["size"]).coalesce()
    if t == "V":
        return tree["v"]
    if t in ("L", "U"):
        items = [build(v, arenas) for v in tree["x"]]
        return items if t == "L" else tuple(items)
    if t == "D":
        return {k: build(v, arenas) for k, v in tree["x"]}
    if t == "G":
        return objects.group(tree["ranks"])
    if t == "Q":
        return torch.nn.Parameter(build(tree["x"], arenas), requires_grad=bool(tree["grad"]))
    if t == "P":
        return objects.unpickled(tree, lambda leaf: build(leaf, arenas))
    raise MemoryError_(f"unknown tree node {t!r}")


def leaves(tree: dict) -> Iterator[dict]:
    if tree["t"] in ("T",):
        yield tree
    elif tree["t"] == "S":
        yield from leaves(tree["i"])
        yield from leaves(tree["v"])
    elif tree["t"] in ("L", "U"):
        for v in tree["x"]:
            yield from leaves(v)
    elif tree["t"] == "D":
        for _, v in tree["x"]:
            yield from leaves(v)
    elif tree["t"] == "Q":
        yield from leaves(tree["x"])
    elif tree["t"] == "P":
        for v in tree["x"]:
            yield from leaves(v)


class ProcReader:
    """The candidate's CPU memory, read through /proc/<pid>/mem (the checker is its parent)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)

    def read(self, p: int, n: int, device: str | None) -> torch.Tensor:
        if device not in (None, "cpu"):
            raise MemoryError_(f"an output on {device}, expected the CPU")
        pointer_ok(p, n)
        try:
            data = os.pread(self.fd, n, p) if n else b""
        except (OSError, OverflowError, ValueError, MemoryError):
            data = b""
        if len(data) != n:
            raise MemoryError_(f"{n} bytes at {p:#x} are not the candidate's memory")
        return torch.frombuffer(bytearray(data), dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)

    def mapped(self, name_prefix: str) -> list[tuple[int, int]]:
        """Address ranges of the candidate's mappings of files whose name starts with the prefix
        (the arenas it was lent: an output there aliases an input)."""
        out = []
        with open(f"/proc/{self.pid}/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and os.path.basename(parts[5]).startswith(name_prefix):
                    a, b = parts[0].split("-")
                    out.append((int(a, 16), int(b, 16)))
        return out

    def close(self) -> None:
        os.close(self.fd)


class IpcReader:
    """The candidate's CUDA allocations, each opened once by IPC handle (the candidate process
    exports an allocation the first time an output lives in it)."""

    def __init__(self, driver: Driver, device: torch.device):
        self.driver, self.device = driver, device
        self.bases: list[int] = []              # sorted
        self.segments: dict[int, tuple[int, int, str]] = {}     # base -> (size, mapped pointer, handle)
        self.lent: list[tuple[int, int, int]] = []              # (candidate's base, nbytes, our pointer)

    def lend(self, lent: list, arenas: dict[int, Any]) -> None:
        """Where the candidate says it mapped our arenas: an output there (an in-place result
        returned) is read from our own mapping; a wrong claim only points us at other inputs."""
        self.lent = [(int(b), min(int(n), arenas[int(i)].nbytes), arenas[int(i)].ptr)
                     for b, n, i in lent if int(i) in arenas]

    def add(self, segments: list) -> None:
        from .cuda import CudaError
        for base, size, handle in segments:
            base, size = int(base), int(size)
            old = self.segments.get(base)
            if old and old[2] == handle and old[0] == size:
                continue
            if old:                              # freed and allocated again at the same address
                self.driver.ipc_close(old[1])
                self.bases.remove(base)
                del self.segments[base]
            try:
                mapped = self.driver.ipc_open(bytes.fromhex(handle))
            except (CudaError, ValueError) as e:
                raise MemoryError_(f"an allocation the candidate announced cannot be opened ({e})") from None
            try:    # the size the driver mapped, not the one claimed: a read past it faults the checker's context
                real = self.driver.allocation(mapped)[1]
            except CudaError:
                real = size
            self.segments[base] = (min(size, real), mapped, handle)
            bisect.insort(self.bases, base)

    def read(self, p: int, n: int, device: str | None, copy: bool = True) -> torch.Tensor:
        if device != "cuda":
            raise MemoryError_(f"an output on {device}, expected the GPU")
        pointer_ok(p, n)
        if n == 0:      # an empty tensor's pointer may be 0, in no allocation: nothing to read
            return torch.empty(0, dtype=torch.uint8, device=self.device)
        for base, nbytes, ours in self.lent:
            if base <= p and p + n <= base + nbytes:
                return bytes_tensor(ours + (p - base), n, self.device)
        i = bisect.bisect_right(self.bases, p) - 1
        if i < 0:
            raise MemoryError_("an output in memory the candidate did not allocate itself")
        base = self.bases[i]
        size, mapped, _ = self.segments[base]
        if p + n > base + size:
            raise MemoryError_("an output in memory the candidate did not allocate itself")
        return bytes_tensor(mapped + (p - base), n, self.device)

    def close(self) -> None:
        for _size, mapped, _ in self.segments.values():
            self.driver.ipc_close(mapped)
        self.segments.clear()
        self.bases.clear()


class Readers:
    """A CUDA job's reader: CPU outputs through /proc/<pid>/mem, CUDA outputs through IPC."""

    def __init__(self, cpu: ProcReader, cuda: IpcReader):
        self.cpu, self.cuda = cpu, cuda

    def read(self, p: int, n: int, device: str | None) -> torch.Tensor:
        return (self.cpu if device == "cpu" else self.cuda).read(p, n, device)

    def add(self, segments: list) -> None:
        self.cuda.add(segments)

    def lend(self, lent: list, arenas: dict[int, Any]) -> None:
        self.cuda.lend(lent, arenas)

    def mapped(self, name_prefix: str) -> list[tuple[int, int]]:
        return self.cpu.mapped(name_prefix)

    def close(self) -> None:
        self.cpu.close()
        self.cuda.close()
