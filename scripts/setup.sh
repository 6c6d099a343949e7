#!/usr/bin/env bash
# Create .venv (once) and install peftviz into it, editable, with its runtime pins (requirements.txt): every python
# of .venv then imports this checkout's peftviz from any folder, and .venv/bin/peftviz runs its command line.
# Then laplace-torch and its two backends without their dependencies (requirements-nodeps.txt: they declare
# torchvision, which breaks the CPU torch; their other dependencies are in requirements.txt). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
# Building the editable install takes pip ~8 s (a build environment with setuptools) and changes only with
# pyproject.toml (entry points, packages): the copy of it that was installed, kept in .venv, says whether to redo it.
installed=.venv/peftviz-installed-pyproject.toml
if cmp -s pyproject.toml "$installed" && [ -x .venv/bin/peftviz ]; then
    .venv/bin/python -m pip install --quiet -r requirements.txt
else
    .venv/bin/python -m pip install --quiet -e . -r requirements.txt
    cp pyproject.toml "$installed"
fi
# After the main install, so that pip never resolves these packages' dependencies (pip may then note that
# laplace-torch "requires torchvision, which is not installed": it is left out on purpose)
.venv/bin/python -m pip install --quiet --no-deps -r requirements-nodeps.txt
