#!/usr/bin/env bash
# Everything the tests need: the project (scripts/setup.sh), the test, lint and documentation pins, and Debian's
# chromium for the browser test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pip install --quiet -r requirements-test.txt -r requirements-docs.txt
if [ ! -x /usr/bin/chromium ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium > /dev/null
fi
