#!/usr/bin/env bash
# Builds kernels, engine, server and their tests with sanitizers and runs the unit and server
# tests under them.
#   bash scripts/sanitize.sh            # AddressSanitizer + UndefinedBehaviorSanitizer (CI)
#   SANITIZER=thread bash scripts/sanitize.sh   # ThreadSanitizer: thread pool, engine, server
set -euo pipefail
cd "$(dirname "$0")/.."
SAN="${SANITIZER:-address,undefined}"
DIR="build-${SAN//,/-}"
cmake -S . -B "$DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLATSTATE_SANITIZE="$SAN" \
  -DFLATSTATE_BUILD_BENCH=OFF -DFLATSTATE_WITH_CUDA=OFF ${FLATSTATE_SAN_CMAKE_ARGS:-} > "$DIR.configure.log"
cmake --build "$DIR" -j "$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
if [[ "$SAN" == thread ]]; then
  ctest --test-dir "$DIR" --output-on-failure -j 2 --timeout 900 \
    -R "ThreadPool|Engine|Server|Scheduler|EngineLoop" -E "LinearStateBytesFlat"
else
  # The long-context state test is exercised by the regular build; everything else runs here.
  ctest --test-dir "$DIR" --output-on-failure -j 2 --timeout 900 -LE "slow"
fi
