#!/usr/bin/env bash
# Runs every test: installs/builds (scripts/setup.sh), then the C++ suite under ctest and the
# Python reference suite under Debian's pytest. Exit status is non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ctest =="
ctest --test-dir build --output-on-failure -j 2 --timeout 900
echo "== pytest (tools/) =="
/usr/bin/python3 -m pytest -q tools/tests
