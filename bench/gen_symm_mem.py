#!/usr/bin/env python3
"""Keep what the four shipped symm_mem solutions share in one place.

Each solution (problems/collective/{all_reduce,all_gather,reduce_scatter,all_to_all}/solutions/
symm_mem.py) must stay a self-contained single-file candidate, so it carries its own copy of
each shared source between two marker lines:

    // >>> shared: bench/symm_mem_common.cu  (...)
    ...copy, written by this script...
    // <<< shared: bench/symm_mem_common.cu

The sources (SOURCES, in file order): the device code (symm_mem_common.cu) and the host launch
helpers (symm_mem_host.cu), both inside the solution's _CUDA_SRC string; the torch binding
(symm_mem_binding.cpp, the whole _CPP_SRC string); the Python tail (symm_mem_state.py.in:
build, rendezvous, per-size state, solution(); a fragment, hence not a .py module), whose
markers are `#` comments. Everything outside the markers is the solution's own and is left
alone. A source's leading header lines (`//!`, `##` for the Python one) are not copied.

    python bench/gen_symm_mem.py           # rewrite the copies from the source
    python bench/gen_symm_mem.py --check   # exit 1 and show the difference where a copy drifted
(`python -m bench.gen_symm_mem` works too.) tests/test_symm_mem_sources.py runs the check.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMON = "bench/symm_mem_common.cu"
SOURCES = (COMMON, "bench/symm_mem_host.cu", "bench/symm_mem_binding.cpp", "bench/symm_mem_state.py.in")
SOLUTIONS = tuple(f"problems/collective/{op}/solutions/symm_mem.py"
                  for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"))

BEGIN = re.compile(r"^(?://|#) >>> shared: (\S+)")
END = re.compile(r"^(?://|#) <<< shared: (\S+)\s*$")


def _is_python(src: str) -> bool:
    return src.endswith(".py.in")


def _comment(src: str) -> str:
    return "#" if _is_python(src) else "//"


def _header(src: str) -> str:
    return "##" if _is_python(src) else "//!"


class GenError(Exception):
    pass


def begin_line(src: str) -> str:
    return (f"{_comment(src)} >>> shared: {src}  (identical in the four symm_mem solutions: edit it there, "
            f"then run python bench/gen_symm_mem.py)\n")


def end_line(src: str) -> str:
    return f"{_comment(src)} <<< shared: {src}\n"


def _scan(text: str) -> str | None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from pytest_kernelbench.candidates.safety import scan  # stdlib only
    return scan(text)


def shared_text(root: Path, src: str) -> str:
    """The lines of `src` that go between the markers (its header lines dropped)."""
    path = root / src
    if not path.is_file():
        raise GenError(f"{src}: shared source not found")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    i = 0
    while i < len(lines) and lines[i].startswith(_header(src)):
        i += 1
    body = "".join(lines[i:])
    if not body.strip():
        raise GenError(f"{src}: nothing to share")
    if not body.endswith("\n"):
        body += "\n"
    if "'''" in body and not _is_python(src):
        raise GenError(f"{src}: contains ''' (the copy sits inside a Python r''' string)")
    if any(BEGIN.match(line) or END.match(line) for line in body.splitlines()):
        raise GenError(f"{src}: contains a shared-region marker line")
    why = _scan(body)
    if why:
        raise GenError(f"{src}: {why}")
    return body


def regions(text: str, name: str = "?") -> list[tuple[int, int, str]]:
    """(begin line index, end line index, source) of each marked region of `text`."""
    out, open_ = [], None
    for i, line in enumerate(text.splitlines()):
        b, e = BEGIN.match(line), END.match(line)
        if b:
            if open_ is not None:
                raise GenError(f"{name}:{i + 1}: shared region opened inside another "
                               f"(opened at line {open_[0] + 1})")
            open_ = (i, b.group(1))
        elif e:
            if open_ is None:
                raise GenError(f"{name}:{i + 1}: '<<< shared' without an opening marker")
            if e.group(1) != open_[1]:
                raise GenError(f"{name}:{i + 1}: region opened for {open_[1]} closed for {e.group(1)}")
            out.append((open_[0], i, open_[1]))
            open_ = None
    if open_ is not None:
        raise GenError(f"{name}:{open_[0] + 1}: shared region for {open_[1]} never closed")
    return out


def render(root: Path, text: str, name: str = "?", required=SOURCES) -> str:
    """`text` with every marked region rewritten from its source (markers made canonical)."""
    found = regions(text, name)
    srcs = [src for _, _, src in found]
    for src in required:
        if srcs.count(src) != 1:
            raise GenError(f"{name}: expected one shared region for {src}, found {srcs.count(src)}")
    lines = text.splitlines(keepends=True)
    out, pos = [], 0
    for b, e, src in found:
        out.extend(lines[pos:b])
        out.append(begin_line(src))
        out.append(shared_text(root, src))
        out.append(end_line(src))
        pos = e + 1
    out.extend(lines[pos:])
    new = "".join(out)
    try:
        ast.parse(new, filename=name)
    except SyntaxError as exc:
        raise GenError(f"{name}: not valid Python after the rewrite: {exc}") from None
    why = _scan(new)
    if why:
        raise GenError(f"{name}: {why}")
    return new


def _read(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def check(root: Path = ROOT, files=SOLUTIONS) -> list[str]:
    """One message per solution whose copy differs from the source (with a short diff) or
    whose markers are broken; empty when all agree."""
    problems = []
    for rel in files:
        path = root / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
            continue
        old = _read(path)
        try:
            new = render(root, old, rel)
        except GenError as exc:
            problems.append(str(exc))
            continue
        if new != old:
            diff = list(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                             f"{rel} (now)", f"{rel} (generated)", n=1))
            shown = "".join(diff[:40]) + (f"... ({len(diff) - 40} more diff lines)\n" if len(diff) > 40 else "")
            problems.append(f"{rel}: shared region differs from its source\n{shown}")
    return problems


def generate(root: Path = ROOT, files=SOLUTIONS) -> list[str]:
    """Rewrite the copies; the solutions that changed. Nothing is written if any fails."""
    todo = []
    for rel in files:
        path = root / rel
        old = _read(path)
        new = render(root, old, rel)
        if new != old:
            todo.append((rel, path, new))
    for _, path, new in todo:
        _write(path, new)
    return [rel for rel, _, _ in todo]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 where a copy drifted")
    args = ap.parse_args(argv)
    if args.check:
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            print(f"{len(problems)} of {len(SOLUTIONS)} solutions out of date: "
                  f"run python bench/gen_symm_mem.py", file=sys.stderr)
            return 1
        print(f"ok: {len(SOLUTIONS)} solutions match {', '.join(SOURCES)}")
        return 0
    try:
        changed = generate()
    except GenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for rel in changed:
        print(f"rewrote {rel}")
    if not changed:
        print(f"unchanged: {len(SOLUTIONS)} solutions match {', '.join(SOURCES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
