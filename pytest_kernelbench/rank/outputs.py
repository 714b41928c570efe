"""A window's outputs as the process holding them describes them, and as the checker reads them.

The candidate process describes each call's output (pointer, shape, stride, dtype: a tree, or for
a plain tensor a [layout, pointer] pair); the checker turns that back into trees and the bytes
each call's tensors take (`expand`, never trusting more than where to look) and reads the bytes
itself (`read`, through rank/memory.py's readers): the bytes read are the verdict.

A tree is plain JSON: {"t": "T"} a strided tensor, "S" a sparse COO tensor (indices and values
trees), "V" a number, string or None, "L"/"U" a list/tuple, "D" a dict, "X" what cannot be read.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from .memory import ADDRESS_END, MAX_DIMS, VALUE_TYPES, MemoryError_, dtype_name, dtype_of, pointer_ok, shape_ok, span


def describe(obj: Any, on_cuda: Callable[[int], None] | None = None) -> dict:
    """An output as a tree of pointers into this process's memory. `on_cuda(ptr)` is told of every
    CUDA tensor (the candidate process exports the allocations the checker has not opened)."""
    if isinstance(obj, torch.Tensor):
        if obj.layout == torch.sparse_coo:
            return {"t": "S", "i": describe(obj._indices(), on_cuda), "v": describe(obj._values(), on_cuda),
                    "size": list(obj.shape)}
        if obj.layout != torch.strided:
            return {"t": "X", "what": f"a tensor of layout {obj.layout}"}
        if type(obj) is not torch.Tensor:
            return {"t": "X", "what": f"a {type(obj).__module__}.{type(obj).__name__}, not a torch.Tensor"}
        p = obj.data_ptr()
        if obj.is_cuda and on_cuda is not None and obj.numel():
            on_cuda(p)
        return {**_layout(obj), "p": p}
    if isinstance(obj, (list, tuple)):
        return {"t": "L" if isinstance(obj, list) else "U", "x": [describe(v, on_cuda) for v in obj]}
    if isinstance(obj, dict):
        return {"t": "D", "x": [[k, describe(v, on_cuda)] for k, v in obj.items()]}
    if isinstance(obj, VALUE_TYPES):
        return {"t": "V", "v": obj}
    return {"t": "X", "what": f"a {type(obj).__module__}.{type(obj).__name__}"}


def describe_calls(objs: list, on_cuda: Callable[[int], None] | None = None) -> tuple[list, list[dict]]:
    """A window's outputs, every call's described: [k, p] for a plain tensor (k: its shape,
    strides, dtype and device, listed once in the second list), a tree otherwise. The hundreds of
    calls of a window return alike tensors; describing each one's layout again cost ~3 us a call."""
    kinds: dict = {}
    layouts: list[dict] = []
    out: list = []
    for o in objs:
        if type(o) is not torch.Tensor or o.layout != torch.strided:
            out.append(describe(o, on_cuda))
            continue
        key = (o.shape, o.stride(), o.dtype, o.device)
        k = kinds.get(key)
        if k is None:
            k = kinds[key] = len(layouts)
            layouts.append(_layout(o))
        p = o.data_ptr()
        if on_cuda is not None and o.is_cuda and o.numel():
            on_cuda(p)
        out.append([k, p])
    return out, layouts


def _layout(t: torch.Tensor) -> dict:
    """A strided tensor's description without its pointer: shape, strides, dtype, device."""
    return {"t": "T", "s": list(t.shape), "st": list(t.stride()), "d": dtype_name(t.dtype), "dev": t.device.type}


def expand(entries: Any, layouts: Any) -> tuple[list[dict], list[list[tuple[int, int]]]]:
    """The checker's side of describe_calls: every call's tree, and the byte spans of its tensors,
    computed here (once per layout) from what was described. ValueError for anything malformed."""
    if type(entries) is not list or type(layouts) is not list:
        raise ValueError("not a list")
    sized = []
    for leaf in layouts:
        if (type(leaf) is not dict or leaf.get("t") != "T" or set(leaf) != {"t", "s", "st", "d", "dev"}
                or type(leaf["s"]) is not list or type(leaf["st"]) is not list or len(leaf["s"]) != len(leaf["st"])
                or len(leaf["s"]) > MAX_DIMS
                or not all(type(v) is int and v >= 0 for v in leaf["s"] + leaf["st"]) or type(leaf["dev"]) is not str):
            raise ValueError("not a tensor's layout")
        sized.append((leaf, _nbytes_of(leaf)))
    trees: list[dict] = []
    spans: list[list[tuple[int, int]]] = []
    for e in entries:
        if type(e) is list:
            if (len(e) != 2 or type(e[0]) is not int or type(e[1]) is not int or not 0 <= e[0] < len(sized)
                    or not 0 <= e[1] < ADDRESS_END):
                raise ValueError("not a [layout, pointer] pair")
            leaf, n = sized[e[0]]
            tree = dict(leaf)
            tree["p"] = e[1]
            trees.append(tree)
            spans.append([(e[1], e[1] + n)] if n else [])
        elif type(e) is dict:
            trees.append(e)
            spans.append(_checked(output_spans, e))
        else:
            raise ValueError("neither a tree nor a [layout, pointer] pair")
    return trees, spans


def _nbytes_of(leaf: dict) -> int:
    """The bytes a layout's tensor spans, from its first element to the end of its last."""
    leaf = dict(leaf, p=0)
    got = _checked(output_spans, leaf)
    return got[0][1] if got else 0


def _checked(fn: Callable, tree: Any) -> Any:
    try:
        return fn(tree)
    except Exception as e:  # noqa: BLE001 - a description that breaks the reading is malformed, whatever it raises
        raise ValueError(f"{type(e).__name__}: {str(e)[:200]}") from None


def output_spans(tree: dict) -> list[tuple[int, int]]:
    """(start, end) of every tensor's bytes in a described output."""
    out = []
    for leaf in _out_leaves(tree):
        n = span(leaf["s"], leaf["st"], dtype_of(leaf["d"]).itemsize)
        if n:
            p = leaf["p"]
            pointer_ok(p, n)
            out.append((p, p + n))
    return out


def _out_leaves(tree: dict) -> Iterator[dict]:
    t = tree.get("t")
    if t == "T":
        yield tree
    elif t == "S":
        yield from _out_leaves(tree["i"])
        yield from _out_leaves(tree["v"])
    elif t in ("L", "U"):
        for v in tree["x"]:
            yield from _out_leaves(v)
    elif t == "D":
        for _, v in tree["x"]:
            yield from _out_leaves(v)


def read(tree: dict, reader: Any) -> Any:
    """The output a tree describes, its tensors copies made by the checker from the candidate's
    memory (`reader.read(ptr, nbytes, device_type)` -> uint8 tensor on the checker's device)."""
    t = tree.get("t")
    if t == "T":
        dt = dtype_of(tree["d"])
        shape, stride = tree["s"], tree["st"]
        shape_ok(shape, stride, dt.itemsize)
        n = span(shape, stride, dt.itemsize)
        raw = reader.read(int(tree["p"]), n, tree.get("dev"))
        if n == 0:
            return torch.empty(shape, dtype=dt, device=raw.device)
        pad = (-n) % dt.itemsize
        if pad:
            raw = torch.cat([raw, raw.new_zeros(pad)])
        return raw.view(dt).as_strided(shape, stride).clone()
    if t == "S":
        return torch.sparse_coo_tensor(read(tree["i"], reader), read(tree["v"], reader), tree["size"])
    if t == "V":
        if not isinstance(tree["v"], VALUE_TYPES):
            raise MemoryError_("a value that is not a number, a string or None")
        return tree["v"]
    if t in ("L", "U"):
        items = [read(v, reader) for v in tree["x"]]
        return items if t == "L" else tuple(items)
    if t == "D":
        return {k: read(v, reader) for k, v in tree["x"]}
    raise MemoryError_(f"the candidate returned {tree.get('what') or 'something that cannot be read'}")
