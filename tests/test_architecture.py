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
    """Every registered method name found in the file's string literals, as a whole word; in the command line
    (peftviz/cli/), in any case: its help would name a method as its paper spells it (AdaLoRA, IA3). Elsewhere case
    counts: the pages' prose (Prefix-tuning gives ...) and peft's own type names (ADALORA) are no method's name."""
    any_case = re.IGNORECASE if path.relative_to(ROOT).parts[:2] == ("peftviz", "cli") else 0
    strings = string_constants(path)  # the file parsed once, not once per name
    found = []
    for name in METHODS:
        word = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])", any_case)
        found += [f"{path.relative_to(ROOT)}:{line}: {name!r}" for line, text in strings if word.search(text)]
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


def test_the_check_finds_a_method_name_in_the_command_line_in_any_case(tmp_path, monkeypatch):
    """A hand-written list of methods in a command's help, as `export` had (LoRA and its variants, AdaLoRA, ...)."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    sample = tmp_path / "peftviz" / "cli" / "sample.py"
    sample.parent.mkdir(parents=True)
    sample.write_text('HELP = "a peft adapter (LoRA and its variants, AdaLoRA, VB-LoRA)"\n')
    assert method_names_in(sample) == ["peftviz/cli/sample.py:1: 'lora'", "peftviz/cli/sample.py:1: 'adalora'"]


def unnamed_methods(entries: dict[str, str]) -> list[str]:
    """Each registry entry (name -> "module:Class" under peftviz.methods) whose class, imported from its module
    without any registry lookup, does not carry that name as a `name` of its own: read from the class's __dict__, so
    a name it inherits from the class it extends does not count."""
    import importlib

    found = []
    for name, entry in entries.items():
        module, class_name = entry.split(":")
        cls = getattr(importlib.import_module(f"peftviz.methods.{module}"), class_name)
        if cls.__dict__.get("name") != name:
            found.append(f"{name}: {entry} has {cls.__dict__.get('name', 'no name of its own')!r}")
    return found


def test_every_registered_method_is_named_by_its_registration():
    """Registration sets a method's name: in a fresh interpreter that imports the classes from their modules and
    never looks one up, each already carries its registry key; looking them up (here) changes nothing."""
    code = "from peftviz.methods import METHODS\nfrom tests.test_architecture import unnamed_methods\n"
    assert python(code + "print(unnamed_methods(METHODS.class_paths()))").strip().splitlines()[-1] == "[]"
    for name, cls in METHODS.items():
        assert cls.__dict__["name"] == name and cls.config_class().to_dict() is not None
    for name in ("peft:LORA", "peft:ADALORA", "external:my-adapter"):  # made by the registry, named as made
        assert METHODS[name].__dict__["name"] == name


def test_the_name_check_finds_a_method_registered_without_registration(monkeypatch):
    """A class the table lists that was made without `@registered` inherits its base's name, and a lookup does not
    name it: the check says so; registering it names it."""
    import types

    from peftviz.methods import MethodRegistry, registration
    from peftviz.methods.fine_tuning import FineTuning

    planted = types.ModuleType("peftviz.methods.planted")
    planted.Planted = type("Planted", (FineTuning,), {"__module__": planted.__name__})
    monkeypatch.setitem(sys.modules, planted.__name__, planted)
    with pytest.raises(TypeError, match="no entry"):
        registration.registered(planted.Planted)  # the table does not list it yet
    monkeypatch.setitem(registration.ENTRIES, "planted", "planted:Planted")
    registry = MethodRegistry(registration.ENTRIES)
    assert registry["planted"] is planted.Planted and planted.Planted.name == "fine-tuning"  # looked up; inherited
    assert unnamed_methods(registry.class_paths()) == ["planted: planted:Planted has 'no name of its own'"]
    assert registration.registered(planted.Planted).name == "planted" and unnamed_methods(registry.class_paths()) == []


# what a method never reaches: it knows nothing of the store, training loops or sweeps (the planner reads what it
# declares as data: `PeftMethod.variants`, `starts_from`)
NOT_FOR_METHODS = ("peftviz.store", "peftviz.training.trainer", "peftviz.sweep")


def method_violations(root: Path) -> list[str]:
    """Each module under peftviz/methods/ that imports the store, the trainer or the sweep, at any depth of its code
    (a function's lazy import counts) or through other peftviz modules: one line with the chain."""
    graph = {module_of(f, root): imports_of(f, root) for f in source_files(root) if f.exists()}
    methods = sorted(name for name in graph if name == "peftviz.methods" or name.startswith("peftviz.methods."))
    chains = [reaches(name, graph, NOT_FOR_METHODS) for name in methods]
    return [" -> ".join(chain) for chain in chains if chain]


def test_methods_import_neither_the_store_nor_the_trainer_nor_the_sweep():
    found = method_violations(ROOT)
    assert len([f for f in (ROOT / "peftviz" / "methods").glob("*.py")]) > 10  # the check covers the methods
    assert found == []


@pytest.mark.parametrize(
    ("planted", "reached"),
    [
        ("from peftviz.store.schema import safetensors_header\n", "peftviz.store.schema"),  # as tiny-attention did
        ("def read(path):\n    from peftviz.training.trainer import resume\n", "peftviz.training.trainer"),  # lazy
        ("import peftviz.sweep.variants\n", "peftviz.sweep.variants"),
    ],
)
def test_the_method_check_finds_a_planted_import(tmp_path, planted, reached):
    import shutil

    shutil.copytree(ROOT / "peftviz", tmp_path / "peftviz", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pages").mkdir()
    (tmp_path / "app.py").write_text("")
    assert method_violations(tmp_path) == []
    lora = tmp_path / "peftviz" / "methods" / "lora.py"
    lora.write_text(lora.read_text() + "\n" + planted)
    assert f"peftviz.methods.lora -> {reached}" in method_violations(tmp_path)


def python(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    ).stdout


@pytest.mark.parametrize(
    "entry",
    [
        "import peftviz",
        "import peftviz.calibration.metrics",
        "import peftviz.analysis.calibration, peftviz.analysis.group_stats, peftviz.figures.calibration",  # Calibration page
        "import peftviz.figures.kernel",  # the α grid comes from the page (which asks the method), not a method module
        "import peftviz.sweep.plan",  # Ray loads only for --engine ray (peftviz.sweep.on_ray)
        "import peftviz.methods; list(peftviz.methods.METHODS)",
        "from peftviz.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
        "from peftviz.cli import main\ntry:\n    main(['compare', '--help'])\nexcept SystemExit:\n    pass",
    ],
)
def test_light_entry_points_import_no_torch(entry):
    """`python -m peftviz --help`, the calibration package, what the Calibration page computes and draws, and the
    sweep's planning load neither torch, transformers nor Ray."""
    loaded = python(f"{entry}\nimport sys\nprint(sorted({{'torch', 'transformers', 'ray'}} & set(sys.modules)))")
    assert loaded.strip().splitlines()[-1] == "[]"


def test_help_lists_the_choices():
    text = subprocess.run(
        [sys.executable, "-m", "peftviz", "compare", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "{cls,mean}" in text and "{linear,cosine}" in text and "--methods" in text


# ---------------------------------------------------------------- layers: core → analysis → figures → app

APP_LAYER = (
    "app.py",
    "pages/",
    "peftviz/app/appkit.py",
    "peftviz/app/jobpanel.py",
)  # the only files that may import streamlit
# What analysis and figures never reach, themselves or through peftviz modules. (The analysis of a model's attention
# loads transformers, and transformers loads accelerate where it is installed: that import is transformers', not ours.)
TRAINING_STACK = ("peftviz.training.trainer", "peftviz.training.engine", "accelerate")


def module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path) -> set[str]:
    """Every module a file imports, at any depth of its code (a function's lazy import counts), as absolute names;
    `from a import b` gives both a and a.b (b may be a module)."""
    package = module_of(path, root).rsplit(".", 1)[0] if path.name != "__init__.py" else module_of(path, root)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return found


def source_files(root: Path) -> list[Path]:
    return sorted((root / "peftviz").rglob("*.py")) + sorted((root / "pages").glob("*.py")) + [root / "app.py"]


def reaches(start: str, graph: dict[str, set[str]], targets: tuple[str, ...]) -> list[str] | None:
    """The chain of peftviz imports from `start` to a module named in `targets` (or inside one), if any."""
    chains, seen = [[start]], {start}
    while chains:
        chain = chains.pop(0)
        for name in sorted(graph.get(chain[-1], ())):
            if any(name == t or name.startswith(f"{t}.") for t in targets):
                return [*chain, name]
            if name in graph and name not in seen:
                seen.add(name)
                chains.append([*chain, name])
    return None


def layer_violations(root: Path) -> list[str]:
    """Where the tree breaks the layering rules, one line each (empty: none)."""
    files = [f for f in source_files(root) if f.exists()]
    graph = {module_of(f, root): imports_of(f, root) for f in files}
    found = []
    for f in files:
        where = str(f.relative_to(root))
        uses_streamlit = any(m == "streamlit" or m.startswith("streamlit.") for m in graph[module_of(f, root)])
        if uses_streamlit and not where.startswith(APP_LAYER):
            found.append(f"{where} imports streamlit, but only the app layer may")
        if where.startswith(("peftviz/analysis/", "peftviz/figures/")):
            chain = reaches(module_of(f, root), graph, TRAINING_STACK)
            if chain:
                found.append(f"{where} reaches the training stack: {' -> '.join(chain)}")
    return found


def test_the_layers_hold():
    """Only the app layer imports streamlit; analysis and figures reach neither the trainer, the engine nor
    accelerate, directly or through other peftviz modules."""
    assert len(source_files(ROOT)) > 60  # the check covers the package, the pages and app.py
    assert layer_violations(ROOT) == []


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        ({"peftviz/analysis/x.py": "import streamlit as st\n"}, "peftviz/analysis/x.py imports streamlit"),
        (
            {"peftviz/store/y.py": "def f():\n    from streamlit import cache_data\n"},
            "peftviz/store/y.py imports streamlit",
        ),
        (
            {"peftviz/figures/z.py": "from peftviz.training import trainer\n"},
            "peftviz.figures.z -> peftviz.training.trainer",
        ),
        (
            {
                "peftviz/analysis/a.py": "from peftviz import helper\n",
                "peftviz/helper.py": "from .training.engine import Engine\n",
            },
            "peftviz.analysis.a -> peftviz.helper -> peftviz.training.engine",
        ),
        ({"peftviz/figures/b.py": "def f():\n    import accelerate\n"}, "peftviz.figures.b -> accelerate"),
    ],
)
def test_the_layer_check_finds_a_planted_violation(tmp_path, planted, expected):
    for name in ("peftviz/__init__.py", "peftviz/analysis/__init__.py", "peftviz/figures/__init__.py", "app.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "1_Page.py").write_text("import streamlit as st\n")  # allowed: the app layer
    assert layer_violations(tmp_path) == []
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = layer_violations(tmp_path)
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize(
    "entry", ["import peftviz.app.appkit", "import peftviz.app.jobs", "import peftviz.app.jobpanel"]
)
def test_the_app_layer_imports_no_trainer(entry):
    """Pages import appkit and the job queue on every run: they must not load the training stack (the trainer
    runs in a child process, `peftviz.app.worker`), nor torch until a page asks for a model."""
    loaded = python(
        f"{entry}\nimport sys\nprint(sorted({{'accelerate', 'torch', 'peftviz.training.trainer'}} & set(sys.modules)))"
    )
    assert loaded.strip().splitlines()[-1] == "[]"


# ---------------------------------------------------------------- no import cycles


def import_graph(root: Path) -> dict[str, set[str]]:
    """peftviz module -> the peftviz modules it imports anywhere in its code: at the top, inside functions (lazy
    imports), under TYPE_CHECKING (knowledge that runs the other way, even if Python never executes it)."""
    files = sorted((root / "peftviz").rglob("*.py"))
    modules = {module_of(f, root): f for f in files}
    return {name: {m for m in imports_of(f, root) if m in modules and m != name} for name, f in modules.items()}


def import_cycles(root: Path) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan's algorithm), as one cycle through it each."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in sorted(graph[name]):
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            group = []
            while not group or group[-1] != name:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return [cycle_through(group, graph) for group in groups]


def cycle_through(group: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One import chain from the group's first module back to itself, staying inside the group."""
    start = group[0]
    chains = [[start]]
    while chains:
        chain = chains.pop(0)
        for name in sorted(graph[chain[-1]] & set(group)):
            if name == start:
                return [*chain, start]
            if name not in chain:
                chains.append([*chain, name])
    return group


def test_no_import_cycle_anywhere_in_the_package():
    """Data flows one way: no peftviz module reaches itself through imports, lazy and type-only ones included."""
    assert len(import_graph(ROOT)) > 60
    assert [" -> ".join(cycle) for cycle in import_cycles(ROOT)] == []


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        (
            {"peftviz/a.py": "from peftviz import b\n", "peftviz/b.py": "def f():\n    from peftviz.a import g\n"},
            "peftviz.a -> peftviz.b -> peftviz.a",
        ),
        (
            {
                "peftviz/a.py": "from peftviz.c import x\n",
                "peftviz/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from peftviz.d import y\n",
                "peftviz/d.py": "from . import a\n",
            },
            "peftviz.a -> peftviz.c -> peftviz.d -> peftviz.a",
        ),
    ],
)
def test_the_cycle_check_finds_a_planted_cycle(tmp_path, planted, expected):
    (tmp_path / "peftviz").mkdir()
    (tmp_path / "peftviz" / "__init__.py").write_text("")
    (tmp_path / "peftviz" / "leaf.py").write_text("from peftviz import other\n")
    (tmp_path / "peftviz" / "other.py").write_text("import os\n")
    assert import_cycles(tmp_path) == []
    for name, text in planted.items():
        (tmp_path / name).write_text(text)
    assert [" -> ".join(cycle) for cycle in import_cycles(tmp_path)] == [expected]


# ---------------------------------------------------------------- every import runs down the layers

# (a lower package, the packages above it that it never reaches): the store reads config.json with the run
# configuration (peftviz.run_config, below it), not with anything of training; the encoders (modeling) know nothing
# of the methods that attach to them, and neither knows the classifier (peftviz.classifier) that composes the two.
DOWNWARD_ONLY = (
    ("peftviz.store", ("peftviz.training",)),
    ("peftviz.modeling", ("peftviz.methods", "peftviz.classifier")),
    ("peftviz.methods", ("peftviz.classifier",)),
)


def upward_imports(root: Path) -> list[str]:
    """Each module of a lower package (DOWNWARD_ONLY) that reaches a package above it, at any depth of its code (lazy
    and TYPE_CHECKING imports count) or through other peftviz modules: one line with the chain."""
    graph = {module_of(f, root): imports_of(f, root) for f in source_files(root) if f.exists()}
    found = []
    for lower, above in DOWNWARD_ONLY:
        modules = sorted(name for name in graph if name == lower or name.startswith(f"{lower}."))
        chains = [reaches(name, graph, above) for name in modules]
        found += [" -> ".join(chain) for chain in chains if chain]
    return found


def test_every_import_runs_down_the_layers():
    """The store imports nothing of training; modeling nothing of the methods; neither the classifier."""
    assert len(list((ROOT / "peftviz" / "store").glob("*.py"))) > 3  # the check covers the store
    assert len(list((ROOT / "peftviz" / "modeling").glob("*.py"))) > 3  # and the encoders
    assert upward_imports(ROOT) == []


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        (  # the arrow the store had: config.json's schema a layer above the store that reads it
            {"peftviz/store/runs.py": "from peftviz.training.config import TrainConfig\n"},
            "peftviz.store.runs -> peftviz.training.config",
        ),
        (
            {"peftviz/store/writer.py": "def f():\n    from peftviz.training import trainer\n"},  # lazy
            "peftviz.store.writer -> peftviz.training",
        ),
        (  # the arrow the classifier had while it lived in modeling/
            {"peftviz/modeling/model.py": "from peftviz.methods import make_method\n"},
            "peftviz.modeling.model -> peftviz.methods",
        ),
        (
            {
                "peftviz/modeling/backbones.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from peftviz.helper import x\n",
                "peftviz/helper.py": "from .methods.base import PeftMethod\n",
            },
            "peftviz.modeling.backbones -> peftviz.helper -> peftviz.methods.base",
        ),
        (
            {"peftviz/methods/lora.py": "from peftviz.classifier import PeftClassifier\n"},
            "peftviz.methods.lora -> peftviz.classifier",
        ),
    ],
)
def test_the_downward_check_finds_a_planted_upward_import(tmp_path, planted, expected):
    for name in ("peftviz/__init__.py", "peftviz/store/runs.py", "peftviz/store/writer.py", "app.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "peftviz" / "store" / "runs.py").write_text("from peftviz.run_config import TrainConfig\n")  # allowed
    (tmp_path / "pages").mkdir()
    assert upward_imports(tmp_path) == []
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((tmp_path / name).read_text() + text if (tmp_path / name).exists() else text)
    assert upward_imports(tmp_path) == [expected]
