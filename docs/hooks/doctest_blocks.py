"""A griffe extension for the API reference: doctest examples in docstrings shown as code.

peftviz's docstrings carry `>>>` examples (run as doctests) outside any "Examples:" section. As
plain Markdown they would read as a paragraph, and `[0.1, 0.2]` in their output as a link. This
extension wraps each run of doctest lines (the `>>>` and `...` lines and the output up to a blank
line) in a fenced `pycon` block before mkdocstrings renders the docstring. mkdocs.yml loads it
(`plugins: mkdocstrings: handlers: python: options: extensions`).
"""

from __future__ import annotations

import griffe

FENCE = "```"


def fence_doctests(text: str) -> str:
    """`text` with every doctest block fenced as `pycon`; text inside existing fences is left alone."""
    out: list[str] = []
    in_fence = in_doctest = False
    indent = ""
    for line in text.splitlines():
        stripped = line.lstrip()
        if in_doctest and (not stripped or not line.startswith(indent)):
            out.append(f"{indent}{FENCE}")
            in_doctest = False
        if not in_doctest and stripped.startswith(FENCE):
            in_fence = not in_fence
        elif not in_fence and not in_doctest and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            out.append(f"{indent}{FENCE}pycon")
            in_doctest = True
        out.append(line)
    if in_doctest:
        out.append(f"{indent}{FENCE}")
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Fence the doctest examples of every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
