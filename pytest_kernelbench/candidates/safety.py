"""NVLink multicast must never run on the lent machines: a program that uses it can take the
host's GPUs out of service for a day. Two layers keep it off:

- here, in the pytest process (stdlib only, no candidate code runs): `scan()` refuses, before
  launch, a candidate whose code names multimem, multicast or NVLS: Python names, string
  literals (CUDA/PTX sources handed to load_inline, environment variable names) and C/C++/CUDA
  code. Comments are not judged (Python `#` comments and bare string statements such as
  docstrings; `//` and `/* */` inside string literals and native sources): a comment that says
  why multicast is not used runs nothing. A module that can read its own text (`__file__`,
  `__doc__`, inspect.getsource, ...) is judged with its comments, since they are then data;
- inside the candidate processes (rank/multicast.py, and a watcher outside them: rank/envwatch.py): an audit hook refuses changes to GUARDED_ENV and the
  driver entry points of multicast, and the guarded variables are checked after every call.

Names built at run time ("multi" + "mem") pass the scan by design; the rank-side layer and the
launcher's variables are the nets there. The launcher sets the multicast variables
(MULTICAST_OFF) for every job unless the run allows multicast.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize

from ..protocol import GUARDED_ENV, MULTICAST_OFF  # noqa: F401 (re-exported)

_TOKEN = re.compile(r"[A-Za-z0-9_]*(?:multimem|multicast|nvls)[A-Za-z0-9_]*", re.IGNORECASE)
MAX_SHOWN = 4
# ways for a module to read its own text, which makes its comments data
SELF_READING = re.compile(r"\b(__file__|__doc__|__loader__|__spec__|__cached__|co_filename|getsource|getsourcelines|"
                          r"getsourcefile|getfile|getdoc|getcomments|findsource|linecache|pydoc)\b")
LANGUAGES = ("python", "c")


def mentions(text: str, first_line: int = 1) -> list[tuple[str, int]]:
    """(word, line) of every multicast word in `text`, comments and all."""
    return [(m.group(0), first_line + lineno) for lineno, line in enumerate((text or "").splitlines())
            for m in _TOKEN.finditer(line)]


def scan(source: str, language: str = "python") -> str | None:
    """One line naming the multicast uses in the code of `source` (word and line of the first
    few), or None when there is none. language: "python" (a candidate module) or "c" (C, C++ or
    CUDA: a native candidate's file or regions)."""
    if language not in LANGUAGES:
        raise ValueError(f"scan: language {language!r} is not one of {LANGUAGES}")
    hits = _python_hits(source or "") if language == "python" else _c_hits(source or "")
    if not hits:
        return None
    shown = ", ".join(f"{word[:60]!r} at line {lineno}" for word, lineno in hits[:MAX_SHOWN])
    more = f" and {len(hits) - MAX_SHOWN} more" if len(hits) > MAX_SHOWN else ""
    return (f"uses NVLink multicast, which never runs on this machine (its code names {shown}{more}; "
            f"comments are not judged)")


# ---- C, C++, CUDA, PTX ------------------------------------------------------------------------------
_RAW_STRING = re.compile(r'(?:u8|u|U|L)?R"([^()\\\s"]{0,16})\(')
_CHAR = re.compile(r"'(?:\\[^\n]{1,10}?|[^'\\\n])'")


def strip_c_comments(text: str) -> tuple[str, list[int]]:
    """(code, line of each character): `text` with its C/C++ comments removed, string and char
    literals kept (a PTX instruction in an asm string is code). Line splices (backslash-newline)
    are joined first, as the compiler does, so `*\\<newline>/` ends a comment here too."""
    chars, lines, line, i, n = [], [], 1, 0, len(text)
    while i < n:                    # translation phase 2: splice lines, remember each char's line
        if text[i] == "\\" and text.startswith("\n", i + 1):
            i, line = i + 2, line + 1
            continue
        chars.append(text[i])
        lines.append(line)
        line += text[i] == "\n"
        i += 1
    s = "".join(chars)
    out, at, i, n = [], [], 0, len(s)

    def keep(j: int) -> None:
        out.append(s[i:j])
        at.extend(lines[i:j])
    while i < n:
        raw = _RAW_STRING.match(s, i) if s[i] in 'uULR' else None
        if raw and (i == 0 or not (s[i - 1].isalnum() or s[i - 1] == "_")):
            end = s.find(")" + raw.group(1) + '"', raw.end())
            j = n if end < 0 else end + len(raw.group(1)) + 2
            keep(j)
            i = j
        elif s.startswith("//", i):
            j = s.find("\n", i)
            i = n if j < 0 else j
        elif s.startswith("/*", i):
            j = s.find("*/", i + 2)
            j = n if j < 0 else j + 2
            ends = [k for k in range(i, j) if s[k] == "\n"]   # kept, so later code stays on its lines
            out.append("\n" * len(ends) or " ")
            at.extend([lines[k] for k in ends] or [lines[i]])
            i = j
        elif s[i] == '"' or (s[i] == "'" and _CHAR.match(s, i)):   # another ' is a digit separator
            j = i + 1
            while j < n and s[j] != s[i] and s[j] != "\n":
                j += 2 if s[j] == "\\" else 1
            j = min(j + 1, n)
            keep(j)
            i = j
        else:
            keep(i + 1)
            i += 1
    return "".join(out), at


def _c_hits(text: str, first_line: int = 1) -> list[tuple[str, int]]:
    code, at = strip_c_comments(text)
    return [(m.group(0), first_line - 1 + at[m.start()]) for m in _TOKEN.finditer(code)]


# ---- Python -------------------------------------------------------------------------------------
def _bare_strings(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions of the string statements that do nothing (docstrings and the like)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    return [((node.lineno, node.col_offset), (node.end_lineno or node.lineno, node.end_col_offset or 0))
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)]


def _string_value(token: str) -> str | None:
    """The text of a plain string literal token (escapes resolved), None for f-strings."""
    try:
        value = ast.literal_eval(token)
    except (SyntaxError, ValueError):
        return None
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value if isinstance(value, str) else None


def _python_hits(source: str) -> list[tuple[str, int]]:
    bare = _bare_strings(source)
    hits: list[tuple[str, int]] = []
    code_parts: list[str] = []
    comments: list[tuple[str, int]] = []
    row = 1
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            kind, text, (row, col) = tok.type, tok.string, tok.start
            if kind == tokenize.COMMENT:
                comments.append((text, row))
            elif kind == tokenize.STRING and any(a <= (row, col) <= b for a, b in bare):
                comments.append((text, row))
            elif kind == tokenize.STRING:
                value = _string_value(text)
                if value is None:      # an f-string (Python < 3.12): judged as written
                    hits += mentions(text, row)
                    code_parts.append(text)
                else:                  # a string may be CUDA/PTX source: its comments are not code
                    # (an escaped newline is no line of the file: lines stop at the token's last)
                    hits += [(w, min(ln, tok.end[0])) for w, ln in _c_hits(value, row)]
                    code_parts.append(value)
            else:                      # names, operators, f-string parts (3.12)
                hits += mentions(text, row)
                code_parts.append(text)
    except (tokenize.TokenError, SyntaxError):
        # text that does not tokenize cannot run; from the last good line on it is judged as written
        hits += mentions("\n".join(source.splitlines()[row - 1:]), row)
    if SELF_READING.search(" ".join(code_parts)):
        hits += [h for text, row in comments for h in mentions(text, row)]
    return sorted(set(hits), key=lambda h: (h[1], h[0]))
