"""The leaderboard as one self-contained HTML page: the tables, the plots inlined as PNG data URIs
(no script, no stylesheet or font from outside)."""
from __future__ import annotations

import base64
from html import escape

from .leaderboard import Table

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 8px 0 4px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; white-space: nowrap; }
th { background: #f0f3f7; }
tr:nth-child(even) td { background: #fafafa; }
p.note { color: #555; font-size: 12px; margin: 2px 0 18px; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; border: 1px solid #ddd; padding: 4px; }
figcaption { font-size: 12px; color: #555; }
"""


def _table(t: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in t.header)
    body = "\n".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    note = f'<p class="note">{escape(t.note)}</p>' if t.note else ""
    return (f'<h2>{escape(t.title)}</h2>\n<table id="{escape(t.key)}"><thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n{body}\n</tbody></table>\n{note}")


def page(tables: list[Table], plots: list[tuple[str, str, bytes]] | None, sources: list[str],
         plots_missing: str | None = None) -> str:
    parts = [_table(t) for t in tables[:1]]
    if plots:
        figs = "\n".join(f'<figure id="plot-{escape(stem)}"><img alt="{escape(title)}" '
                         f'src="data:image/png;base64,{base64.b64encode(png).decode()}">'
                         f"<figcaption>{escape(title)}</figcaption></figure>" for stem, title, png in plots)
        parts.append(f'<h2>Plots</h2>\n<div class="plots">\n{figs}\n</div>')
    elif plots_missing:
        parts.append(f'<p class="note">{escape(plots_missing)}</p>')
    parts += [_table(t) for t in tables[1:]]
    listed = "".join(f"<li><code>{escape(s)}</code></li>" for s in sources)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>kernelbench leaderboard</title><style>{STYLE}</style></head>\n<body>\n"
            "<h1>kernelbench leaderboard</h1>\n" + "\n".join(parts)
            + f"\n<h2>Reports</h2><ul>{listed}</ul>\n</body></html>\n")
