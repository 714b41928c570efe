"""The leaderboard as one self-contained HTML page: the tables, the plots inlined as PNG data URIs
(no script, no stylesheet or font from outside). It fits a 1400 px window: names, machines and
failure lists wrap inside their cells, numbers do not, and no image is wider than the page."""
from __future__ import annotations

import base64
import re
from html import escape

from .leaderboard import REPORTS_NOTE, Table
from .plots import Plot

WRAPPED = {"model / candidate", "machine", "failures"}     # text columns; every other cell is a number
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 8px 0 4px; max-width: 100%; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; white-space: nowrap; }
th { background: #f0f3f7; white-space: normal; }
td.text { white-space: normal; min-width: 8em; max-width: 24em; }
tr:nth-child(even) td { background: #fafafa; }
p.note { color: #555; font-size: 12px; margin: 2px 0 18px; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
figure { margin: 0; border: 1px solid #ddd; padding: 4px; max-width: 100%; box-sizing: border-box; }
figure img { max-width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; color: #555; }
li { overflow-wrap: anywhere; }
"""


def _table(t: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in t.header)
    text = [h in WRAPPED for h in t.header]
    body = "\n".join("<tr>" + "".join(f'<td class="text">{escape(c)}</td>' if text[n] else f"<td>{escape(c)}</td>"
                                      for n, c in enumerate(row)) + "</tr>" for row in t.rows)
    note = f'<p class="note">{escape(t.note)}</p>' if t.note else ""
    return (f'<h2>{escape(t.title)}</h2>\n<table id="{escape(t.key)}"><thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n{body}\n</tbody></table>\n{note}")


def _code(text: str) -> str:
    """Markdown's `x` as <code>x</code>, the rest escaped."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", escape(text))


def _plots(plots: list[Plot]) -> str:
    drawn = [p for p in plots if p.png]
    figs = "\n".join(f'<figure id="plot-{escape(p.stem)}"><img alt="{escape(p.title)}" '
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
