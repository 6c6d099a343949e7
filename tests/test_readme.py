"""The README as a newcomer reads it: at most 150 lines (the detail lives in docs/), every Python example fenced
as ```python, and every such block runs as pasted, with the installed package, from a folder outside the checkout.

A block runs as a script of its own in a temporary folder (cwd, so `import peftviz` comes from the editable
install in .venv, not from the checkout; no PYTHONPATH), offline, with the run store, the cache and the temporary
folder all inside that folder. The site's home page shows some of the same blocks: it may only show blocks the
README has, so that this test runs them too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 150
# a shell line of an indented code block starts with one of these; anything else there may be Python in disguise
SHELL_STARTS = ("bash ", ".venv/bin/")


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", path.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_the_readme_is_at_most_150_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines: move detail to docs/"


def test_every_fenced_block_is_python_and_every_indented_block_a_shell_command():
    """The run below finds the README's Python: none hides in another fence or in an indented block."""
    lines = README.read_text().splitlines()
    fences = [line for line in lines if line.startswith("```")]
    assert fences and all(fence in ("```python", "```") for fence in fences), fences
    inside, previous = False, ""
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            inside = not inside
        elif not inside and line.startswith("    ") and not previous.strip():  # the first line of an indented block
            assert line.strip().startswith(SHELL_STARTS), f"README.md:{number}: {line.strip()}"
        previous = line


def test_the_site_s_home_page_shows_only_the_readme_s_python_blocks():
    shown, run = python_blocks(ROOT / "docs" / "index.md"), python_blocks(README)
    assert set(shown) <= set(run), "docs/index.md has a Python block the README lacks: tests/test_readme.py skips it"


def test_the_readme_has_its_python_examples():
    """The split found the blocks (a broken regex would leave the run below nothing to run)."""
    blocks = python_blocks(README)
    assert len(blocks) >= 3
    assert all("import" in block for block in blocks)  # each a whole script: its imports included


@pytest.mark.slow  # each block a fresh Python that loads torch (seconds each)
@pytest.mark.parametrize("index", range(len(python_blocks(README))))
def test_a_readme_python_block_runs_as_pasted_outside_the_checkout(index, tmp_path):
    block = python_blocks(README)[index]
    script = tmp_path / f"readme_block_{index}.py"
    script.write_text(block)
    for name in ("runs", "cache", "tmp"):
        (tmp_path / name).mkdir()
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PEFTVIZ_RUNS=str(tmp_path / "runs"),
        PEFTVIZ_CACHE=str(tmp_path / "cache"),
        TMPDIR=str(tmp_path / "tmp"),
    )
    done = subprocess.run(
        [sys.executable, script.name], check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"README block {index + 1} failed as pasted:\n{block}\n{done.stderr[-3000:]}"
