#!/usr/bin/env bash
# Runs every test: sets up (scripts/setup.sh: installs missing packages and builds build/; on a
# current tree it runs no apt and compiles nothing), then the C++ suite under ctest, the C++
# suite but its multi-process and client tests (tests/system, tests/clients) under
# AddressSanitizer + UndefinedBehaviorSanitizer (scripts/sanitize.sh, a clang -O1 -g1 build in
# build-asan/ that also holds the fuzzers), every libFuzzer target for FUZZ_SECONDS
# (scripts/fuzz.sh, the same build-asan/, one fuzzer per core at once; 30 s each here, 60 s
# when fuzz.sh runs alone) and the Python reference suite under Debian's pytest. Each build
# compiles only what changed since the last run. Exit status is non-zero if anything fails.
# docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== setup =="
bash scripts/setup.sh
echo "== ctest =="
export FLATSTATE_REQUIRE_ORACLES=1
ctest --test-dir build --output-on-failure -j 2 --timeout 900
echo "== sanitizers (ASan + UBSan) =="
nice bash scripts/sanitize.sh
echo "== fuzzers =="
FUZZ_SECONDS="${FUZZ_SECONDS:-30}" nice bash scripts/fuzz.sh
echo "== pytest (tools/) =="
/usr/bin/python3 -m pytest -q tools/tests
