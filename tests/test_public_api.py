"""The API the README documents stays importable under its documented names, whatever the layout inside."""

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the names the README and the API reference promise (the issue that moved the modules into folders kept them)
PROMISED = [
    ("peftviz", "build_classifier"),
    ("peftviz", "load_encoder"),
    ("peftviz.calibration.estimators", "estimate_all"),
    ("peftviz.calibration.estimators", "ESTIMATORS"),
    ("peftviz.calibration.metrics", "ece"),
    ("peftviz.integrations.transformers", "PeftvizCallback"),
    ("peftviz.record", "open_run"),
]


def readme_imports() -> list[tuple[str, str]]:
    """(module, name) of every `from peftviz... import a, b` line in the README's code blocks."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.DOTALL)
    found = []
    for line in "\n".join(blocks).splitlines():
        match = re.fullmatch(r"from (peftviz[\w.]*) import (.+)", line.strip())
        if match:
            found += [(match.group(1), name.strip()) for name in match.group(2).split(",")]
    return found


def test_the_readme_imports_are_the_promised_ones():
    assert len(readme_imports()) >= 3 and set(readme_imports()) <= set(PROMISED)


@pytest.mark.parametrize(("module", "name"), PROMISED)
def test_a_documented_name_imports(module, name):
    assert getattr(importlib.import_module(module), name) is not None
