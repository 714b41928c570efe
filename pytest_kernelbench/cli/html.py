"""The leaderboard as one self-contained HTML page: the tables, the plots inlined as PNG data URIs
(no script, no stylesheet or font from outside). It fits a 1400 px window whatever the run holds:
names, machines and failure lists wrap inside their cells, numbers do not; a breakdown's tag names
break after "_" and "/", and a breakdown with more than TAGS_A_TABLE tags (a full run has 13
families) is cut into tables of that many columns; the plots sit two to a row (a wide one alone),
each scaled to its column from a PNG at least 1000 px wide."""
from __future__ import annotations

import base64
import math
import re
from html import escape

from .. import metrics
from .leaderboard import REPORTS_NOTE, Table
from .plots import Plot

WRAPPED = {"model / candidate", "machine", "failures"}     # text columns; every other cell is a number
TAGGED = {*metrics.BREAKDOWNS, "rounds"}     # tables whose columns are tags: any number of them
TAGS_A_TABLE = 12
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 8px 0 4px; max-width: 100%; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; white-space: nowrap; }
th { background: #f0f3f7; white-space: normal; }
td.text { white-space: normal; min-width: 8em; max-width: 24em; }
tr:nth-child(even) td { background: #fafafa; }
p.note { color: #555; font-size: 12px; margin: 2px 0 18px; }
.plots { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px; align-items: start; }
figure { margin: 0; border: 1px solid #ddd; padding: 4px; min-width: 0; box-sizing: border-box; }
figure.wide { grid-column: 1 / -1; }
figure img { width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; color: #555; }
li { overflow-wrap: anywhere; }
"""


def _breakable(name: str) -> str:
    """A tag as a header that may break after "_" and "/" (gemm_reduce_scatter is one long word)."""
    return escape(name).replace("_", "_<wbr>").replace("/", "/<wbr>")


def _grid(key: str, header: list[str], rows: list[list[str]], tagged: bool) -> str:
    head = "".join(f"<th>{_breakable(h) if tagged and n else escape(h)}</th>" for n, h in enumerate(header))
    text = [h in WRAPPED for h in header]
    body = "\n".join("<tr>" + "".join(f'<td class="text">{escape(c)}</td>' if text[n] else f"<td>{escape(c)}</td>"
                                      for n, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<table id="{escape(key)}"><thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>'


def _table(t: Table) -> str:
    note = f'<p class="note">{escape(t.note)}</p>' if t.note else ""
    if t.key not in TAGGED or len(t.header) <= TAGS_A_TABLE + 1:
        grids = [_grid(t.key, t.header, t.rows, t.key in TAGGED)]
    else:         # the label column, then the tags in as few tables as hold TAGS_A_TABLE each, evenly
        tags = len(t.header) - 1
        per = math.ceil(tags / math.ceil(tags / TAGS_A_TABLE))
        grids = [_grid(t.key if n == 0 else f"{t.key}-{n + 1}", [t.header[0], *t.header[a:a + per]],
                       [[r[0], *r[a:a + per]] for r in t.rows], True) for n, a in enumerate(range(1, tags + 1, per))]
    return f'<h2>{escape(t.title)}</h2>\n' + "\n".join(grids) + f"\n{note}"


def _code(text: str) -> str:
    """Markdown's `x` as <code>x</code>, the rest escaped."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", escape(text))


def _plots(plots: list[Plot]) -> str:
    drawn = [p for p in plots if p.png]
    wide = ' class="wide"'
    figs = "\n".join(f'<figure id="plot-{escape(p.stem)}"{wide if p.wide else ""}><img alt="{escape(p.title)}" '
                     f'src="data:image/png;base64,{base64.b64encode(p.png or b"").decode()}">'
                     f"<figcaption>{escape(p.title)}{'; ' + escape(p.note) if p.note else ''}</figcaption>"
                     "</figure>" for p in drawn)
    left_out = "".join(f'<li id="left-out-{escape(p.stem)}">{escape(p.title)}: {escape(p.note)}</li>'
                       for p in plots if not p.png)
    return ("<h2>Plots</h2>\n" + (f'<div class="plots">\n{figs}\n</div>\n' if drawn else "")
            + (f'<p class="note">Left out, with nothing to show:</p><ul class="note">{left_out}</ul>' if left_out
               else ""))


def page(tables: list[Table], plots: list[Plot] | None, reports: list[tuple[str, str]],
         plots_missing: str | None = None) -> str:
    parts = [_table(t) for t in tables[:1]]
    if plots:
        parts.append(_plots(plots))
    elif plots_missing:
        parts.append(f'<p class="note">{escape(plots_missing)}</p>')
    parts += [_table(t) for t in tables[1:]]
    listed = "".join(f"<li><code>{escape(path)}</code>: {_code(text)}</li>" for path, text in reports)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>kernelbench leaderboard</title><style>{STYLE}</style></head>\n<body>\n"
            "<h1>kernelbench leaderboard</h1>\n" + "\n".join(parts)
            + f'\n<h2>Reports</h2><p class="note">{escape(REPORTS_NOTE)}</p><ul id="reports">{listed}</ul>\n'
            "</body></html>\n")
