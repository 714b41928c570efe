"""Every native problem's hidden glue.py, run without a GPU against a fake library: what it declares
(names, restypes, argtypes), what it calls with which values and in which order, what it shares
(exchange, IPC buffers, shared segments), when it synchronizes, what it returns and how it fails.
The traces must equal tests/data/glue_traces.json, recorded from the glue files before they were
rewritten onto the standard setup (issue 25), so a rewrite that calls anything differently fails.

Record a new problem's trace (or one whose glue is meant to change; read it before committing):
    PYTHONPATH=$PWD python tests/test_native_glue.py --write <category>/<name> ...
(no names: every glue file.)
"""
from __future__ import annotations

import ctypes
import difflib
import hashlib
import importlib.util
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parent.parent
PROBLEMS = REPO / "problems"
GOLDEN = Path(__file__).resolve().parent / "data" / "glue_traces.json"
sys.path.insert(0, str(REPO))

from pytest_kernelbench.rank import glue as glue_mod  # noqa: E402
from pytest_kernelbench.rank.native import NativeContext  # noqa: E402

GLUES = sorted(p.parent for p in PROBLEMS.glob("*/*/glue.py"))
STREAM = 0x5EED_0000_0000          # ctx.stream() of the fake context
BUFS_BASE = 0x7A00_0000_0000       # the fake IPC buffers, one per rank, 1 GiB apart
SEGMENT = 0x7B00_0000_0000         # the fake shared segment
FAIL_RC = 7                        # what an injected failing call returns


def _tname(t: Any) -> str:
    return "None" if t is None else getattr(t, "__name__", repr(t))


class FakeFn:
    """A library function: records the signature set on it and every call."""

    def __init__(self, lib: FakeLib, name: str) -> None:
        object.__setattr__(self, "_lib", lib)
        object.__setattr__(self, "__name__", name)
        object.__setattr__(self, "restype", ctypes.c_int)
        object.__setattr__(self, "argtypes", None)

    def __setattr__(self, key: str, value: Any) -> None:
        shown = [_tname(t) for t in value] if key == "argtypes" else _tname(value)
        self._lib.trace.event("set", self.__name__, key, shown)
        object.__setattr__(self, key, value)

    def __call__(self, *args: Any) -> Any:
        lib, name = self._lib, self.__name__
        if self.restype is ctypes.c_char_p:
            ret: Any = b"injected" if name == "kb_last_error" else b""
        elif self.restype is ctypes.c_int and name.endswith("_bytes"):
            ret = 133
        elif self.restype is ctypes.c_int:            # a call that returns 0 or an error code
            lib.rc_calls += 1
            ret = FAIL_RC if lib.rc_calls == lib.fail_at else 0
        elif self.restype is ctypes.c_size_t:
            ret = 1_000_003                           # unlike any size the glue computes
        else:
            ret = None
        lib.trace.event("call", name, list(args), ret)
        return ret


class FakeLib:
    """Stands for the ctypes.CDLL of the built library (attributes cached as CDLL caches them)."""

    def __init__(self, trace: Trace, fail_at: int = 0) -> None:
        self.trace, self.fail_at, self.rc_calls = trace, fail_at, 0
        self._fns: dict[str, FakeFn] = {}

    def __getattr__(self, name: str) -> FakeFn:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._fns.setdefault(name, FakeFn(self, name))


class Trace:
    """Raw events of one phase, formatted once the pointers they pass have names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.raw: list[tuple] = []
        self.names: dict[int, str] = {STREAM: "stream", SEGMENT: "segment"}

    def event(self, *e: Any) -> None:
        self.raw.append(e)

    def flush(self, extra: dict[int, str] | None = None) -> None:
        names = {**self.names, **(extra or {})}
        for i, (kind, *rest) in enumerate(self.raw):
            if kind == "call":
                name, args, ret = rest
                self.lines.append(f"{name}({', '.join(_fmt(a, names) for a in args)}) -> {_fmt(ret, names)}")
            elif kind == "set" and rest[1] == "restype" and self.raw[i + 1:i + 2] and \
                    self.raw[i + 1][1:3] == (rest[0], "argtypes"):
                continue                                    # declare(): shown with its argtypes
            elif kind == "set" and rest[1] == "argtypes" and i and self.raw[i - 1][1:3] == (rest[0], "restype"):
                self.lines.append(f"declare {self.raw[i - 1][3]} {rest[0]}({', '.join(rest[2])})")
            elif kind == "set":
                self.lines.append(f"{rest[0]}.{rest[1]} = {rest[2]}")
            else:
                self.lines.append(f"{kind}({', '.join(_fmt(a, names) for a in rest)})")
        self.raw.clear()


def _fmt(a: Any, names: dict[int, str]) -> str:
    if a is None:
        return "None"
    if isinstance(a, bool):
        return repr(a)
    if isinstance(a, int):
        if a in names:
            return names[a]
        return "<unnamed pointer>" if a > 1 << 32 else str(a)
    if isinstance(a, ctypes.c_void_p):
        return f"void*({'NULL' if a.value is None else _fmt(a.value, names)})"
    if isinstance(a, ctypes.Array) and a._type_ is ctypes.c_void_p:
        return f"void*[{len(a)}]({', '.join(_fmt(v, names) for v in a)})"
    if isinstance(a, ctypes.Array) and a._type_ is ctypes.c_char:
        return f"char[{len(a)}]"
    if isinstance(a, ctypes._SimpleCData):
        return f"{type(a).__name__}({_fmt(a.value, names)})"
    if isinstance(a, bytes):
        return f"bytes[{len(a)}]:{hashlib.sha1(a).hexdigest()[:12]}"
    if isinstance(a, torch.device):
        return str(a)
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(_fmt(v, names) for v in a) + "]"
    if isinstance(a, str):
        return repr(a)
    return f"<{type(a).__name__}>"


class FakeContext(NativeContext):
    def stream(self) -> int:
        return STREAM


@contextmanager
def _patched(trace: Trace, rank: int, world: int) -> Iterator[None]:
    """glue's communication and torch.cuda.synchronize, recorded instead of done."""
    def exchange(obj: object) -> list:
        trace.event("exchange", obj)
        return [obj if q == rank else f"<rank {q}'s object>".encode() for q in range(world)]

    def ipc_buffers(lib: Any, ctx: NativeContext, nbytes: int) -> ctypes.Array:
        trace.event("ipc_buffers", nbytes)
        ptrs = (ctypes.c_void_p * ctx.world)(*[BUFS_BASE + (q << 30) for q in range(ctx.world)])
        return ptrs

    def shared_segment(ctx: NativeContext, nbytes: int) -> int:
        trace.event("shared_segment", nbytes)
        return SEGMENT

    def synchronize(device: Any = None) -> None:
        trace.event("cuda.synchronize", device)

    saved = [(glue_mod, "exchange"), (glue_mod, "ipc_buffers"), (glue_mod, "shared_segment"),
             (torch.cuda, "synchronize")]
    old = [getattr(o, n) for o, n in saved]
    for (o, n), new in zip(saved, [exchange, ipc_buffers, shared_segment, synchronize]):
        setattr(o, n, new)
    try:
        yield
    finally:
        for (o, n), v in zip(saved, old):
            setattr(o, n, v)


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    return []


def _shown(t: torch.Tensor) -> str:
    return f"Tensor{list(t.shape)} {str(t.dtype).removeprefix('torch.')} {t.device}"


def scenario(folder: Path, world: int, rank: int, fail_at: int = 0, glue_file: Path | None = None) -> list[str]:
    """One rank's glue: native_setup, then one native_call on the first size's inputs."""
    spec = yaml.safe_load((folder / "problem.yaml").read_text())
    dtype = getattr(torch, spec["dtype"])
    device = torch.device("cuda", rank) if "cuda" in spec["devices"] else torch.device("cpu")
    sizes = {k: dict(v) for k, v in spec["sizes"].items()}
    harness = _load(folder / "harness.py", f"kb_harness_{folder.name}")
    glue = _load(glue_file or folder / "glue.py", f"kb_glue_{folder.name}")
    trace = Trace()
    lib = FakeLib(trace, fail_at)
    ctx = FakeContext(rank, world, device, dtype, sizes)
    trace.names.update({BUFS_BASE + (q << 30): f"bufs{q}" for q in range(world)})
    named: dict[int, str] = {}
    with _patched(trace, rank, world):
        try:
            if hasattr(glue, "native_setup"):
                glue.native_setup(lib, ctx)
            trace.flush()
            trace.lines.append("-- call")
            first = next(iter(sizes.values()))
            inputs = harness.inputs(first, rank, world, torch.Generator().manual_seed(0), "cpu", dtype)
            named = {t.data_ptr(): f"in{i}" for i, t in reversed(list(enumerate(_tensors(inputs))))}
            out = glue.native_call(lib, tuple(inputs), ctx)
            outs = {t.data_ptr(): f"out{j}" for j, t in reversed(list(enumerate(_tensors(out)))) if t.data_ptr()}
            trace.flush({**named, **outs})
            trace.lines.append("return " + ", ".join(_shown(t) for t in _tensors(out)))
        except Exception as e:  # noqa: BLE001 - the failure is part of the trace
            trace.flush(named)
            trace.lines.append(f"raise {type(e).__name__}: {e}")
    return trace.lines


def traces(folder: Path, glue_file: Path | None = None) -> dict[str, list[str]]:
    """The smallest world at its first and last rank and the largest at its last; then, at the first,
    each checked call failing in turn (kept from the failing call on: what came before is the same)."""
    spec = yaml.safe_load((folder / "problem.yaml").read_text())
    w0, w1 = spec["world_sizes"][0], spec["world_sizes"][-1]
    out: dict[str, list[str]] = {}
    for w, r in dict.fromkeys([(w0, 0), (w0, w0 - 1), (w1, w1 - 1)]):
        out[f"W={w} rank={r}"] = scenario(folder, w, r, glue_file=glue_file)
    ok = out[f"W={w0} rank=0"]
    checked = sum(1 for ln in ok if ln.endswith("-> 0") and not ln.startswith("kb_abort"))
    for k in range(1, checked + 1):
        failed = scenario(folder, w0, 0, fail_at=k, glue_file=glue_file)
        at = next(i for i, ln in enumerate(failed) if ln.endswith(f"-> {FAIL_RC}"))
        assert failed[:at] == ok[:at], "a failing call changed what came before it"
        out[f"W={w0} rank=0 call {k} fails"] = failed[at:]
    return out


def _key(folder: Path) -> str:
    return folder.relative_to(PROBLEMS).as_posix()


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


def test_every_glue_has_a_golden_trace(golden):
    assert sorted(golden) == [_key(f) for f in GLUES], "record it: python tests/test_native_glue.py --write <cat>/<name>"
    assert len(GLUES) >= 30


@pytest.mark.parametrize("folder", GLUES, ids=_key)
def test_glue_calls_exactly_what_it_called_before(folder, golden):
    got, want = traces(folder), golden[_key(folder)]
    assert list(got) == list(want)
    for name, lines in want.items():
        diff = "\n".join(difflib.unified_diff(lines, got[name], "golden", "now", lineterm=""))
        assert got[name] == lines, f"{name}:\n{diff}"


def test_a_glue_that_passes_one_value_differently_fails_the_comparison(golden, tmp_path):
    folder = PROBLEMS / "collective" / "ipc_one_shot_allreduce"
    src = (folder / "glue.py").read_text()
    for old, new in [("kb_all_reduce", "kb_all_gather"),                   # another entry point
                     ('"n")', '"n") + 2'),                                   # a different buffer size
                     ("torch.empty_like(x)", "torch.empty_like(x).float()")]:  # another output
        assert old in src, old
        changed = tmp_path / f"glue_{len(old)}.py"
        changed.write_text(src.replace(old, new, 1))
        assert traces(folder, glue_file=changed) != golden[_key(folder)], (old, new)


@pytest.mark.parametrize("buffer_bytes, setup, why", [
    ([4096], [glue_mod.RANK], "a ctypes value"),                    # a bare int: its C type would be a guess
    ([glue_mod.BUFS], [glue_mod.RANK], "BUFS is an argument of kb_setup"),
])
def test_an_argument_of_the_standard_setup_must_say_its_c_type(buffer_bytes, setup, why):
    trace = Trace()
    ctx = FakeContext(0, 2, torch.device("cuda", 0), torch.float32, {"s": {"n": 1}})
    with _patched(trace, 0, 2), pytest.raises(TypeError, match=why):
        glue_mod.ipc_setup(FakeLib(trace), ctx, buffer_bytes=buffer_bytes, setup=setup, entry=("kb_f",))


if __name__ == "__main__":
    if sys.argv[1:2] != ["--write"]:
        sys.exit(__doc__)
    only = sys.argv[2:]
    keys = {_key(f): f for f in GLUES}
    if set(only) - set(keys):
        sys.exit(f"no glue.py in problems/ for {sorted(set(only) - set(keys))}")
    old = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    new = {k: traces(f) if not only or k in only else old[k] for k, f in keys.items()}
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(new, indent=1) + "\n")
    print(f"wrote {GOLDEN}: {', '.join(only) or f'all {len(keys)} glue files'}")
