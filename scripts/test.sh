#!/usr/bin/env bash
# Runs every test: installs/builds (scripts/setup.sh), then the C++ suite under ctest, the C++
# suite again under AddressSanitizer + UndefinedBehaviorSanitizer (scripts/sanitize.sh), every
# libFuzzer target for FUZZ_SECONDS (scripts/fuzz.sh, default 60 s each) and the Python reference
# suite under Debian's pytest. Exit status is non-zero if anything fails. docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ctest =="
ctest --test-dir build --output-on-failure -j 2 --timeout 900
echo "== sanitizers (ASan + UBSan) =="
nice bash scripts/sanitize.sh
echo "== fuzzers =="
FUZZ_SECONDS="${FUZZ_SECONDS:-60}" nice bash scripts/fuzz.sh
echo "== pytest (tools/) =="
/usr/bin/python3 -m pytest -q tools/tests
