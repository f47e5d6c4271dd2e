#!/usr/bin/env bash
# Builds kernels, engine, server and their tests with sanitizers and runs the unit and server
# tests under them (docs/reliability.md).
#   bash scripts/sanitize.sh            # AddressSanitizer + UndefinedBehaviorSanitizer (CI)
#   SANITIZER=thread bash scripts/sanitize.sh   # ThreadSanitizer: thread pool, engine, server
# ThreadSanitizer reports inside Debian's uninstrumented gRPC/absl are suppressed by
# tests/tsan.supp (library frames only; a report in project code is never suppressed), and a
# third-party leak (c-ares) by tests/lsan.supp.
set -euo pipefail
cd "$(dirname "$0")/.."
SAN="${SANITIZER:-address,undefined}"
DIR="build-${SAN//,/-}"
cmake -S . -B "$DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLATSTATE_SANITIZE="$SAN" \
  -DFLATSTATE_BUILD_BENCH=OFF -DFLATSTATE_WITH_CUDA=OFF -DFLATSTATE_WITH_GRPC=ON \
  ${FLATSTATE_SAN_CMAKE_ARGS:-} > "$DIR.configure.log"
cmake --build "$DIR" -j "${FLATSTATE_JOBS:-$(nproc)}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp"
if [[ "$SAN" == thread ]]; then
  ctest --test-dir "$DIR" --output-on-failure -j 2 --timeout 900 \
    -R "ThreadPool|Engine|Server|Scheduler|EngineLoop|ProcessRestart|FaultTest|LimitsTest|SecurityTest" \
    -E "LinearStateBytesFlat"
else
  # The long-context state test is exercised by the regular build, and the soak (label soak)
  # judges RSS, which ASan's quarantine inflates; everything else runs here.
  ctest --test-dir "$DIR" --output-on-failure -j 2 --timeout 900 -LE "slow|soak"
fi
