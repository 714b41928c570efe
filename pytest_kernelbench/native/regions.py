"""Edit regions of a native template: parse the markers, splice a candidate's regions into the
pristine template, and refuse any change outside them.

A region is the lines between `// >>> EDIT name` and `// <<< EDIT name` (each marker alone on its
line). A candidate answers with the whole file or with only its regions (each between its markers;
outside them only blank lines and // comments). Either way the source that is built is the
template's own fixed text with the candidate's region bodies in place, and `LineMap` says, for
every line of it, which template line or which region line it is, so compiler messages can point
at what the author sees. Standard library only (runs in the pytest process).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

START = re.compile(r"^[ \t]*//[ \t]*>>>[ \t]*EDIT[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*$")
END = re.compile(r"^[ \t]*//[ \t]*<<<[ \t]*EDIT[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*$")


class MarkerError(ValueError):
    """Markers that do not pair up; str() names the line."""


class EditError(ValueError):
    """A change outside the regions (edit_outside_region); str() names the first differing line."""


@dataclass
class Parsed:
    lines: list                     # every line, without newlines
    regions: dict                   # name -> (start marker index, end marker index), 0-based
    order: list = field(default_factory=list)

    def body(self, name: str) -> list:
        s, e = self.regions[name]
        return self.lines[s + 1:e]


def parse(text: str, what: str = "the file") -> Parsed:
    lines = text.splitlines()
    regions, order, open_ = {}, [], None
    for i, line in enumerate(lines):
        m_start, m_end = START.match(line), END.match(line)
        if m_start:
            if open_ is not None:
                raise MarkerError(f"{what} line {i + 1}: region '{m_start.group(1)}' starts inside region "
                                  f"'{open_[0]}' (opened at line {open_[1] + 1})")
            name = m_start.group(1)
            if name in regions:
                raise MarkerError(f"{what} line {i + 1}: region '{name}' appears twice")
            open_ = (name, i)
        elif m_end:
            if open_ is None or open_[0] != m_end.group(1):
                raise MarkerError(f"{what} line {i + 1}: end of region '{m_end.group(1)}' without its start")
            regions[open_[0]] = (open_[1], i)
            order.append(open_[0])
            open_ = None
    if open_ is not None:
        raise MarkerError(f"{what} line {open_[1] + 1}: region '{open_[0]}' is never closed "
                          f"(expected '// <<< EDIT {open_[0]}')")
    return Parsed(lines, regions, order)


@dataclass
class LineMap:
    """Per line of the spliced source: ("fixed", template line) or ("region", name, line in region)."""
    entries: list

    def describe(self, line: int, filename: str) -> str:
        """`template.cu:37` for a fixed line, `template.cu[EDIT kernel]:3` for line 3 of region kernel."""
        if not 1 <= line <= len(self.entries):
            return f"{filename}:{line}"
        e = self.entries[line - 1]
        return f"{filename}:{e[1]}" if e[0] == "fixed" else f"{filename}[EDIT {e[1]}]:{e[2]}"


@dataclass
class Spliced:
    source: str
    regions: dict                   # name -> body text the candidate gave (or the template's)
    mode: str                       # "file" | "regions"
    linemap: LineMap


def outside_is_blank(p: Parsed) -> bool:
    """Only blank lines and // comments outside the regions: an answer of regions only."""
    inside: set[int] = set()
    for s, e in p.regions.values():
        inside.update(range(s, e + 1))
    return all(not ln.strip() or ln.strip().startswith("//") for i, ln in enumerate(p.lines) if i not in inside)


def regions_only(text: str) -> dict | None:
    """name -> body of an answer made of regions only, else None (a whole file, or bad markers)."""
    try:
        p = parse(text)
    except MarkerError:
        return None
    return {n: "\n".join(p.body(n)) for n in p.order} if p.order and outside_is_blank(p) else None


def assemble(template: Parsed, bodies: dict) -> tuple[str, LineMap]:
    """The template's fixed lines with `bodies` (name -> list of lines) in its regions."""
    out: list[str] = []
    entries: list[tuple] = []       # LineMap's: ("fixed", line) or ("region", name, line)
    pos = 0
    for name in template.order:
        s, e = template.regions[name]
        for i in range(pos, s + 1):
            out.append(template.lines[i])
            entries.append(("fixed", i + 1))
        for k, ln in enumerate(bodies[name], 1):
            out.append(ln)
            entries.append(("region", name, k))
        pos = e
    for i in range(pos, len(template.lines)):
        out.append(template.lines[i])
        entries.append(("fixed", i + 1))
    return "\n".join(out) + "\n", LineMap(entries)


def splice(template_text: str, answer: str, filename: str = "template.cu") -> Spliced:
    """The source to build from a candidate's answer. Raises EditError (edit_outside_region)."""
    template = parse(template_text, filename)
    try:
        got = parse(answer, "your file")
    except MarkerError as e:
        raise EditError(f"{e}; the region markers must stay exactly as in {filename}") from None
    unknown = [n for n in got.order if n not in template.regions]
    if unknown:
        raise EditError(f"your file has a region '{unknown[0]}' that {filename} does not have "
                        f"(its regions: {', '.join(template.order)})")
    if got.order and outside_is_blank(got):
        bodies = {n: (got.body(n) if n in got.regions else template.body(n)) for n in template.order}
        source, linemap = assemble(template, bodies)
        return Spliced(source, {n: "\n".join(b) for n, b in bodies.items()}, "regions", linemap)
    bodies = {n: (got.body(n) if n in got.regions else template.body(n)) for n in template.order}
    source, linemap = assemble(template, bodies)
    _same_outside(source.splitlines(), linemap, got.lines, template, filename)
    return Spliced(source, {n: "\n".join(b) for n, b in bodies.items()}, "file", linemap)


def _same_outside(expected: list[str], linemap: LineMap, got: list[str], template: Parsed, filename: str) -> None:
    """The whole-file answer must be the template with its region bodies: the first line where it is
    not (trailing spaces and trailing blank lines aside) is named."""
    exp = [ln.rstrip() for ln in expected]
    have = [ln.rstrip() for ln in got]
    while exp and not exp[-1]:
        exp.pop()
    while have and not have[-1]:
        have.pop()
    for i in range(max(len(exp), len(have))):
        a = exp[i] if i < len(exp) else None
        b = have[i] if i < len(have) else None
        if a == b:
            continue
        where = linemap.describe(i + 1, filename) if i < len(exp) else f"after the end of {filename}"
        if b is None:
            raise EditError(f"your file ends at line {len(have)}, but {where} follows: {(a or '').strip()!r} "
                            "(only the EDIT regions may change)")
        if a is None:
            raise EditError(f"line {i + 1} of your file adds {b.strip()!r} after the end of {filename} "
                            "(only the EDIT regions may change)")
        raise EditError(f"line {i + 1} of your file differs from {where}: expected {a.strip()!r}, "
                        f"found {b.strip()!r} (only the EDIT regions may change)")
