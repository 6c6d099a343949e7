"""Markdown tables for the terminal: what the CLI prints."""

from __future__ import annotations


def format_table(rows: list[dict]) -> str:
    """Rows of dicts -> a markdown table; floats to 3 significant digits. The columns are every key of any
    row, in order of first appearance; a row without one shows "–" there (None too)."""
    if not rows:
        return "(none)"

    def cell(value) -> str:
        if value is None:
            return "–"
        if isinstance(value, float):
            return f"{value:.3g}"
        return str(value)

    header = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(row.get(key)) for key in header) + " |" for row in rows]
    return "\n".join(lines)


def first_few(names: list[str], at_most: int = 3) -> str:
    """The first few of `names`, comma-separated, and how many more: "a, b, c and 33 more"."""
    listed = ", ".join(names[:at_most])
    return listed if len(names) <= at_most else f"{listed} and {len(names) - at_most} more"
