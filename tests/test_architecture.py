"""The rules of the code's layout: a method is one unit, and the light entry points stay light."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from peftviz.methods import METHODS

ROOT = Path(__file__).resolve().parent.parent


def string_constants(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string literal in a file that is not a docstring (documentation may name methods)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def method_names_in(path: Path) -> list[str]:
    """Every registered method name found in the file's string literals, as a whole word."""
    found = []
    for name in METHODS:
        word = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")
        found += [
            f"{path.relative_to(ROOT)}:{line}: {name!r}" for line, text in string_constants(path) if word.search(text)
        ]
    return found


def code_outside_methods() -> list[Path]:
    package = sorted(p for p in (ROOT / "peftviz").rglob("*.py") if "methods" not in p.relative_to(ROOT).parts)
    return package + sorted((ROOT / "pages").glob("*.py")) + [ROOT / "app.py"]


def test_no_method_name_outside_the_methods_package():
    """Everything peftviz knows about a method it asks the method's class: no code names one."""
    files = code_outside_methods()
    assert len(files) > 20  # the search really covers the package and the pages
    found = [hit for path in files for hit in method_names_in(path)]
    assert found == []


def test_the_check_finds_a_method_name(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    sample = tmp_path / "sample.py"
    sample.write_text('"""The prefix-tuning docstring may name it."""\nif method == "prefix-tuning":\n    pass\n')
    assert method_names_in(sample) == ["sample.py:2: 'prefix-tuning'"]


def test_every_registered_method_loads_and_knows_its_name():
    for name, cls in METHODS.items():
        assert cls.name == name and cls.config_class().to_dict() is not None


def python(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    ).stdout


@pytest.mark.parametrize(
    "entry",
    [
        "import peftviz",
        "import peftviz.calibration",
        "import peftviz.methods; list(peftviz.methods.METHODS)",
        "from peftviz.__main__ import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
        "from peftviz.__main__ import main\ntry:\n    main(['compare', '--help'])\nexcept SystemExit:\n    pass",
    ],
)
def test_light_entry_points_import_no_torch(entry):
    """`python -m peftviz --help` and the calibration module load neither torch nor transformers."""
    loaded = python(f"{entry}\nimport sys\nprint(sorted({{'torch', 'transformers'}} & set(sys.modules)))")
    assert loaded.strip().splitlines()[-1] == "[]"


def test_help_lists_the_choices():
    text = subprocess.run(
        [sys.executable, "-m", "peftviz", "compare", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert "{cls,mean}" in text and "{linear,cosine}" in text and "--methods" in text
