"""The table of docs/one-gpu.md: every CUDA problem, and whether it runs with its ranks sharing a GPU
(--kb-oversubscribe) or skips and why (spec/shared.py decides). `python -m
pytest_kernelbench.spec.shared_docs` rewrites it; tests/test_shared_placement.py checks it is current."""
from __future__ import annotations

from pathlib import Path

from .problem import load_problem
from .shared import classify


TABLE_MARKS = ("<!-- shared-device table: python -m pytest_kernelbench.spec.shared_docs -->", "<!-- end of table -->")
PAGE = "docs/one-gpu.md"


def table_markdown(root: Path) -> str:
    """The classification of every CUDA problem under `root` as a markdown table."""
    problems = [load_problem(y, root) for y in sorted(Path(root).glob("*/*/problem.yaml"))]
    rows = ["| problem | W | with ranks sharing a GPU |", "|---|---|---|"]
    by_id = {p.id: p for p in problems}
    for pid, verdict in classify(problems):
        ws = "/".join(str(w) for w in by_id[pid].world_sizes)
        rows.append(f"| {pid} | {ws} | {verdict.replace('|', '/')} |")
    return "\n".join(rows)


def write_page(page: Path, root: Path) -> bool:
    """Put the table into docs/one-gpu.md between its marks; True when it changed."""
    text = page.read_text()
    head, rest = text.split(TABLE_MARKS[0], 1)
    _, tail = rest.split(TABLE_MARKS[1], 1)
    new = f"{head}{TABLE_MARKS[0]}\n{table_markdown(root)}\n{TABLE_MARKS[1]}{tail}"
    if new != text:
        page.write_text(new)
    return new != text


if __name__ == "__main__":
    repo = Path(__file__).resolve().parent.parent.parent
    changed = write_page(repo / PAGE, repo / "problems")
    print(f"{PAGE} table " + ("updated" if changed else "already up to date"))
