"""From a model's answer to a candidate module.

Rule (the prompt states it): the module is the LAST fenced code block that defines solution();
blocks are not joined (a helper block followed by a solution block would be two modules, and
joining guesses wrong as often as it helps). Blocks tagged python/py/python3 or untagged count;
other languages (cuda, cpp, bash, ...) are ignored, since C++/CUDA goes into the module as a
load_inline string. When no block defines solution(), the last Python block is used (it then
fails as a compile error naming the missing solution()); an answer cut off inside a block (the
token limit) keeps what it has. An answer without fences that parses as Python and defines
solution() is taken whole. Anything else has no code: `no_code`.
"""
from __future__ import annotations

import ast
import re

FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+.-]*)[^\n]*$", re.M)
PY_TAGS = {"", "python", "py", "python3", "py3"}
DEFINES = re.compile(r"^(?:async\s+)?def\s+solution\s*\(|^solution\s*=|^from\s+\S+\s+import\s+.*\bsolution\b", re.M)


def blocks(answer: str) -> list[tuple[str, str, bool]]:
    """[(language tag, code, closed), ...] in order of appearance."""
    out = []
    pos = 0
    while True:
        m = FENCE.search(answer, pos)
        if not m:
            break
        fence, tag = m.group(1), m.group(2).lower()
        start = m.end() + 1
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M)
        c = close.search(answer, start)
        if c is None:
            out.append((tag, answer[start:], False))
            break
        out.append((tag, answer[start:c.start()], True))
        pos = c.end()
    return out


def defines_solution(code: str) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return bool(DEFINES.search(code))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "solution":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "solution" for t in node.targets):
            return True
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == "solution" for a in node.names):
            return True
    return False


def extract(answer: str | None) -> tuple[str | None, str]:
    """(module source or None, how it was found)."""
    if not answer or not answer.strip():
        return None, "the answer is empty"
    py = [(code, closed) for tag, code, closed in blocks(answer) if tag in PY_TAGS and code.strip()]
    defining = [(code, closed) for code, closed in py if defines_solution(code)]
    if defining:
        code, closed = defining[-1]
        how = f"last of {len(py)} Python blocks defining solution()" if len(py) > 1 else "the Python block"
        return code.strip("\n") + "\n", how + ("" if closed else " (unterminated: the answer was cut off)")
    if py:
        return py[-1][0].strip("\n") + "\n", "the last Python block (none defines solution())"
    if "```" not in answer and "~~~" not in answer and defines_solution(answer):
        try:
            ast.parse(answer)
            return answer.strip("\n") + "\n", "the whole answer (no code fence)"
        except SyntaxError:
            pass
    return None, "the answer has no Python code block"


# ---- native problems (problems/NATIVE.md): C++/CUDA, the whole file or only its EDIT regions ----------
NATIVE_TAGS = {"", "cuda", "cu", "cpp", "c++", "cxx", "cc", "c", "h", "hpp", "cuh"}


def extract_native(answer: str | None) -> tuple[str | None, str]:
    """(candidate text or None, how it was found). The last C++/CUDA block when it is a whole file;
    when it holds only regions, the regions of every such block after the last whole file, a later
    block's region replacing an earlier one of the same name. Never joined with a whole file."""
    from ..native.regions import regions_only
    if not answer or not answer.strip():
        return None, "the answer is empty"
    code = [c for tag, c, _ in blocks(answer) if tag in NATIVE_TAGS and c.strip()]
    if not code:
        if "```" not in answer and "~~~" not in answer and regions_only(answer) is not None:
            return answer.strip("\n") + "\n", "the whole answer (no code fence)"
        return None, "the answer has no C++/CUDA code block"
    if regions_only(code[-1]) is None:
        return code[-1].strip("\n") + "\n", "the last C++/CUDA block (a whole file)"
    merged: dict = {}
    for c in code:
        found = regions_only(c)
        if found is None:
            merged = {}
        else:
            merged.update(found)
    text = "\n".join(f"// >>> EDIT {n}\n{body}\n// <<< EDIT {n}" for n, body in merged.items()) + "\n"
    return text, f"the EDIT regions of the last C++/CUDA blocks ({', '.join(merged)})"
