#!/usr/bin/env bash
# Create .venv (once) and install requirements.txt into it. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
.venv/bin/python -m pip install --quiet -r requirements.txt
