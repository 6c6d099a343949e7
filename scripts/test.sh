#!/usr/bin/env bash
# The tests as CI runs them (.ci/run calls this script): the setup, ruff's lint and format check, the
# documentation's strict build, then pytest. Arguments go to pytest (e.g. -x); CI passes none.
set -euo pipefail
cd "$(dirname "$0")/.."
# the site is built outside the checkout (strict: a broken link, reference or docstring fails), removed on exit
site_dir="$(mktemp -d)"
trap 'rm -rf "$site_dir"' EXIT
bash scripts/setup-tests.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# NO_MKDOCS_2_WARNING: mkdocs-material prints a banner about its end of life on every build otherwise
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$site_dir"
# two pytest-xdist workers (docs/tests.md, "Two workers": each trained store built once and shared; a test file's
# tests on one worker, Chromium's with the newcomer's walk on one, Ray's on one); PEFTVIZ_TEST_WORKERS=0: one process
.venv/bin/python -m pytest -n "${PEFTVIZ_TEST_WORKERS:-2}" --dist loadgroup "$@"
