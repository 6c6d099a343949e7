#!/usr/bin/env bash
# The inner loop (docs/tests.md): every test but the browser tests, the slow ones (those that train on the shipped
# MiniLM or in child processes) and the long ones, on the .venv that scripts/setup-tests.sh made. Arguments go to
# pytest (e.g. -x, or a folder: tests/store). CI runs everything (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# two pytest-xdist workers, as scripts/test.sh; PEFTVIZ_TEST_WORKERS=0 runs in this process
exec .venv/bin/python -m pytest -n "${PEFTVIZ_TEST_WORKERS:-2}" --dist loadgroup -m "not slow and not browser and not long" "$@"
