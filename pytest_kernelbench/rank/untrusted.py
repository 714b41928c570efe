"""What a candidate process says, made safe for the checker to act on (issue 44, class 4).

Everything a solver process hands over (its Done, its Failed, the pointers, sizes and trees it
describes) is read here with bounds on every size, depth and pointer, so that nothing it says can
raise inside the checker (where any exception ends the item as the harness's) or name a verdict
that is not its own: it may only fail with a candidate category (protocol.reported_category), and
whatever breaks while its Done is decoded, checked, expanded or its outputs read is its failure.
"""
from __future__ import annotations

from typing import Any

from ..protocol import Done, Failure, SpecError, decode, reported_category
from .failures import ItemFailed
from .memory import ADDRESS_END, MemoryError_

MAX_DEPTH = 96               # JSON levels of one described output (a list of a tree takes two, a dict's three)
MAX_NODES = 1 << 20          # nodes of one described output
MAX_TEXT = 4000              # characters of a message or traceback it sends that are kept
MAX_ITEMS = 1 << 16          # entries of the Done's small lists and dicts (threads, forbidden calls, ...)


class Broken(ValueError):
    """The candidate process described something the checker refuses (its runtime_error)."""


def done_of(payload: bytes) -> Done:
    """The batch's Done from the control page, checked field by field; ItemFailed (the candidate's
    runtime_error) for anything that is not a well-formed Done."""
    try:
        done = decode(payload)
        if not isinstance(done, Done):
            raise Broken("no Done")
        checked(done)
    except (SpecError, Broken) as e:
        raise ItemFailed(Failure.RUNTIME_ERROR, f"the candidate process broke the protocol ({e})", "candidate") from None
    except Exception as e:  # noqa: BLE001 - whatever it wrote, breaking our reading of it is its failure
        raise ItemFailed(Failure.RUNTIME_ERROR, f"the candidate process broke the protocol ({type(e).__name__})",
                         "candidate") from None
    return done


def checked(done: Done) -> None:
    """Every field of a decoded Done within its bounds (the types of the fields themselves were
    checked by protocol.decode); Broken says which is not."""
    if len(done.outputs) > MAX_ITEMS * 16 or len(done.layouts) > MAX_ITEMS:
        raise Broken("too many outputs described")
    for e in done.outputs:      # the rest of each entry's form: outputs.expand, when it is read
        if type(e) is dict:
            tree_ok(e)
    for tree in done.inputs:
        if type(tree) is not dict:
            raise Broken("an input set that is not a tree")
        tree_ok(tree)
    _texts(done.threads, "threads")
    _texts(done.state, "state")
    if len(done.forbidden) > MAX_ITEMS or not all(type(k) is str and type(v) is int and v >= 0
                                                   for k, v in done.forbidden.items()):
        raise Broken("forbidden calls not counted as {name: count}")
    done.forbidden = {k[:MAX_TEXT]: v for k, v in done.forbidden.items()}
    if done.unsafe is not None:
        done.unsafe = done.unsafe[:MAX_TEXT]
    _triples(done.lent, "lent", (int, int, int))
    _triples(done.segments, "segments", (int, int, str))
    for base, size, _ in done.lent + done.segments:
        if not (0 <= base < ADDRESS_END and 0 <= size <= ADDRESS_END - base):
            raise Broken("a memory range out of bounds")
    if len(done.stamps) > 16 or not all(type(s) in (int, float) for s in done.stamps):
        raise Broken("stamps that are not times")
    done.stamps = [seconds(s) for s in done.stamps]
    if done.probe_s is not None:
        done.probe_s = seconds(done.probe_s)
    if done.failed is not None:
        done.failed = failure_dict(done.failed)


def failure_dict(failed: dict) -> dict:
    """A candidate process's account of its failure as the checker keeps it: only a candidate
    category, and text of bounded length."""
    return {"category": reported_category(failed.get("category")), "message": text(failed.get("message")),
            "traceback": text(failed.get("traceback"))}


def seconds(v: int | float) -> float:
    """A number it sent, as a float the checker can compute with (an int past 1e308 would raise)."""
    try:
        return float(v)
    except OverflowError:
        return float("inf")


def text(v: object) -> str:
    return v[:MAX_TEXT] if isinstance(v, str) else ""


def _texts(items: list, what: str) -> None:
    if len(items) > MAX_ITEMS or not all(type(s) is str for s in items):
        raise Broken(f"{what} that are not names")
    items[:] = [s[:MAX_TEXT] for s in items]


def _triples(items: list, what: str, kinds: tuple[type, ...]) -> None:
    if len(items) > MAX_ITEMS or not all(type(x) is list and len(x) == len(kinds)
                                         and all(type(v) is k for v, k in zip(x, kinds)) for x in items):
        raise Broken(f"{what} not described as {len(kinds)}-element lists")


def tree_ok(tree: dict) -> None:
    """A described output no deeper than MAX_DEPTH and no larger than MAX_NODES (walked without
    recursion: a tree of any depth must not reach the checker's own stack)."""
    todo: list[tuple[Any, int]] = [(tree, 0)]
    nodes = 0
    while todo:
        node, depth = todo.pop()
        nodes += 1
        if depth > MAX_DEPTH or nodes > MAX_NODES:
            raise Broken(f"an output nested deeper than {MAX_DEPTH} or larger than {MAX_NODES} nodes")
        children = node.values() if type(node) is dict else node if type(node) is list else ()
        todo.extend((v, depth + 1) for v in children if type(v) in (dict, list))


def read(tree: Any, reader: Any) -> Any:
    """outputs.read, any exception on the way (a malformed tree, a refused pointer, a tensor the
    checker cannot rebuild) the candidate's unreadable output (MemoryError_), never the checker's."""
    from . import outputs
    try:
        return outputs.read(tree, reader)
    except MemoryError_:
        raise
    except Exception as e:  # noqa: BLE001 - what it described is the candidate's, whatever breaks
        raise MemoryError_(f"an output the checker cannot read ({type(e).__name__}: {str(e)[:200]})") from None
