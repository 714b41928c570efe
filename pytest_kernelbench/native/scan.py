"""What region code may not do (`forbidden_construct`): reach outside the build recipe or the
process. Only the candidate's region bodies are scanned (the fixed part is the problem's own).

A static net, not a sandbox: comments and string literals are blanked first (a comment that says
"do not call system()" is fine), digraphs are read as what they mean, and the ways to build a
name the scan cannot see (token pasting `##`, universal character names) are refused themselves.
"""
from __future__ import annotations

import re
from collections.abc import Collection

# any mention: starting processes, loading code, reaching symbols by name, changing the environment
NAMES = ("system", "popen", "fork", "vfork", "clone", "execl", "execlp", "execle", "execv", "execvp", "execvpe",
         "execve", "fexecve", "posix_spawn", "posix_spawnp", "dlopen", "dlmopen", "dlsym", "dlvsym", "syscall",
         "ptrace", "setenv", "putenv", "unsetenv", "clearenv", "cuGetProcAddress", "cuGetProcAddress_v2",
         "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion")
# only as calls: files (the problem folder, the job's control files) are none of a kernel's business
CALLS = ("fopen", "freopen", "open", "openat", "creat", "shm_open", "mmap", "remove", "unlink", "rename")
ALLOWED_PRAGMAS = ("unroll", "nounroll")
DIRECTIVES_OK = ("define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif",
                 "error", "warning")

_NAME = re.compile(r"\b(" + "|".join(NAMES) + r")\b")
_CALL = re.compile(r"\b(" + "|".join(CALLS) + r")\s*\(")
_ASM = re.compile(r"\b(asm|__asm__|__asm)\b")
_DIRECTIVE = re.compile(r"^\s*#\s*([A-Za-z_]\w*)?(.*)$")
_INCLUDE = re.compile(r"""^\s*[<"]([^>"]+)[>"]\s*$""")


_CHAR = re.compile(r"'(?:\\[^\n]{1,10}?|[^'\\\n])'")


def blank_comments_and_strings(text: str, strings: bool = True) -> str:
    """Comments (and, with `strings`, string/char literal contents) become spaces; newlines stay,
    so line numbers hold. A quote that starts no short char literal is a digit separator (1'000)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == '"' or (c == "'" and _CHAR.match(text, i)):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(text[i:j] if not strings else c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _logical_lines(code: str):
    """(first physical line number, text) with backslash-continued lines joined."""
    start, buf = None, []
    for no, line in enumerate(code.splitlines(), 1):
        if start is None:
            start = no
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        yield start, " ".join(buf)
        start, buf = None, []
    if buf:
        yield start, " ".join(buf)


def scan_region(name: str, body: str, headers: Collection[str] = (), asm: bool = False) -> str | None:
    """One line naming the first forbidden construct in region `name`, or None."""
    if re.search(r'(?<![A-Za-z0-9_])(?:u8|u|U|L)?R"', blank_comments_and_strings(body, strings=False)):
        return f"region '{name}': raw string literals are not allowed in a region"
    digraphs = (("%:%:", "##"), ("%:", "#"))
    directives = blank_comments_and_strings(body, strings=False)
    code = blank_comments_and_strings(body)
    for old, new in digraphs:
        directives, code = directives.replace(old, new), code.replace(old, new)
    for no, line in _logical_lines(directives):
        where = f"region '{name}' line {no}"
        d = _DIRECTIVE.match(line)
        if not d:
            continue
        word, rest = d.group(1) or "", d.group(2)
        if word == "include":
            m = _INCLUDE.match(rest)
            header = m.group(1) if m else rest.strip()
            if header not in headers:
                allowed = ", ".join(headers) or "none"
                return f"{where}: #include of header {header!r} (a region may include: {allowed})"
        elif word == "pragma":
            first = (rest.split() or [""])[0]
            if first not in ALLOWED_PRAGMAS:
                return f"{where}: #pragma {rest.strip()!r} (a region may use only #pragma unroll)"
        elif word not in DIRECTIVES_OK:
            return f"{where}: the directive #{word} is not allowed in a region"
    for no, line in _logical_lines(code):
        where = f"region '{name}' line {no}"
        if "##" in line:
            return f"{where}: token pasting (##) is not allowed in a region"
        if re.search(r"\\[uU][0-9A-Fa-f]", line):
            return f"{where}: universal character names (\\u, \\U) are not allowed in a region"
        if "_Pragma" in line or "__pragma" in line:
            return f"{where}: _Pragma is not allowed in a region"
        if not asm:
            m = _ASM.search(line)
            if m:
                return f"{where}: inline assembly ({m.group(1)}) is not allowed in this problem"
        m = _NAME.search(line)
        if m:
            return f"{where}: {m.group(1)}() is not allowed (region code may not start processes, load " \
                   "libraries, look up symbols or change the environment)"
        m = _CALL.search(line)
        if m:
            return f"{where}: {m.group(1)}() is not allowed (region code may not open or change files)"
        if re.search(r"__attribute__\s*\(\(\s*(constructor|destructor)", line):
            return f"{where}: constructor/destructor attributes are not allowed in a region"
    return None


def scan(regions: dict, headers: Collection[str] = (), asm: bool = False) -> str | None:
    for name, body in regions.items():
        found = scan_region(name, body, headers, asm)
        if found:
            return found
    return None
