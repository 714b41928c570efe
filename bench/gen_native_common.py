#!/usr/bin/env python3
"""Keep the fixed helpers of the native CUDA problems in one place.

Every native problem's template.cu and solution.cu is a self-contained program, and most of them
define the same flag and error helpers (release store, acquire load, the bounded wait, kb_fail,
KB_CHECK, the CUDA IPC allocation and mapping). bench/native_common.cu holds the one definition
of each; this script copies it over every definition of the same name in problems/*/*/*.cu. A
unit is a definition: from its first line (`__device__ __forceinline__ ... kb_x(`,
`static ... kb_x(`, `extern "C" ... kb_x(`, `#define KB_X(`) to its closing `}` at column 0
(or the macro's last continued line). Comments around it and everything else stay the file's
own; a problem that needs a different helper gives it another name.

    python bench/gen_native_common.py           # rewrite every copy from the source
    python bench/gen_native_common.py --check   # exit 1 and show the difference where a copy drifted
tests/test_native_common.py runs the check.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "bench" / "native_common.cu"
_FUNC = re.compile(r'^(?:__device__ __forceinline__|static|extern "C")[^;]*?\b(kb_\w+)\(')
_MACRO = re.compile(r"^#define (KB_\w+)\(")


def units(text: str) -> dict[str, tuple[int, int]]:
    """Definition name -> (first line, last line + 1) in text.split("\\n")."""
    lines = text.split("\n")
    found: dict[str, tuple[int, int]] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        macro, func = _MACRO.match(line), _FUNC.match(line)
        if macro:
            j = i
            while lines[j].endswith("\\") and j + 1 < len(lines):
                j += 1
            found[macro.group(1)] = (i, j + 1)
            i = j + 1
        elif func and not line.rstrip().endswith(";"):
            j = i
            if not line.rstrip().endswith("}"):    # a one-line definition ends where it starts
                while j + 1 < len(lines) and lines[j] != "}":
                    j += 1
            found[func.group(1)] = (i, j + 1)
            i = j + 1
        else:
            i += 1
    return found


def canonical() -> dict[str, str]:
    text = SOURCE.read_text()
    lines = text.split("\n")
    return {name: "\n".join(lines[a:b]) for name, (a, b) in units(text).items()}


def files() -> list[Path]:
    return sorted(ROOT.glob("problems/*/*/*.cu"))


def render(text: str, shared: dict[str, str]) -> str:
    """`text` with every definition that has a shared twin replaced by it."""
    lines = text.split("\n")
    for name, (a, b) in sorted(units(text).items(), key=lambda kv: -kv[1][0]):   # bottom up: spans stay valid
        if name in shared:
            lines[a:b] = shared[name].split("\n")
    return "\n".join(lines)


def drift() -> list[str]:
    shared = canonical()
    out = []
    for f in files():
        text = f.read_text()
        new = render(text, shared)
        if new != text:
            rel = f.relative_to(ROOT).as_posix()
            out.append("".join(difflib.unified_diff(text.splitlines(True), new.splitlines(True), rel, "bench/native_common.cu")))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="report drift, change nothing")
    a = ap.parse_args(argv)
    if a.check:
        found = drift()
        sys.stdout.write("".join(found))
        return 1 if found else 0
    shared = canonical()
    for f in files():
        text = f.read_text()
        new = render(text, shared)
        if new != text:
            f.write_text(new)
            print(f"rewrote {f.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
