#!/usr/bin/env bash
# Builds flatstate's engine, kernels (CUDA sm_80 + sm_90) and tests on a GPU machine that has CMake,
# a C++20 compiler and nvcc but maybe no package registry, then runs the tests. The usual way is
# scripts/gpu_bundle.sh here + scripts/gpu_run.sh there (no build there); this is the fallback.
# See docs/gpu.md.
#
#   scripts/gpu_build.sh [build-dir]            (default build-gpu)
#
# Environment:
#   GTEST_SOURCE_DIR   GoogleTest source tree (e.g. a carried copy of Debian's /usr/src/googletest),
#                      used when no installed GoogleTest is found (-DFLATSTATE_GTEST_SOURCE_DIR).
#   FLATSTATE_DEPS     prefix of a carried folder holding abseil and nlohmann_json
#                      (include/, lib/, lib/cmake/, lib/pkgconfig/; see docs/gpu.md for how to make
#                      it from Debian's packages). Added to CMAKE_PREFIX_PATH, PKG_CONFIG_PATH and
#                      LD_LIBRARY_PATH.
#   BENCH              ON to build flatstate-bench (needs Google Benchmark); default: ON when
#                      benchmark's CMake config is found, else OFF.
#   JOBS               parallel build jobs (default: nproc).
#   RUN_TESTS          0 to build only.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build-gpu}"
JOBS="${JOBS:-$(nproc)}"

command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || { echo "gpu_build: nvcc not found (PATH or /usr/local/cuda/bin)" >&2; exit 1; }
nvcc --version | tail -1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || \
  echo "gpu_build: nvidia-smi not found; the CUDA tests will SKIP if no GPU is visible"

args=(-DFLATSTATE_WITH_GRPC=OFF -DFLATSTATE_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release
      -DCMAKE_CUDA_COMPILER="$(command -v nvcc)")
if [[ -n "${FLATSTATE_DEPS:-}" ]]; then
  args+=(-DCMAKE_PREFIX_PATH="$FLATSTATE_DEPS")
  export PKG_CONFIG_PATH="$FLATSTATE_DEPS/lib/pkgconfig:$FLATSTATE_DEPS/lib/x86_64-linux-gnu/pkgconfig:${PKG_CONFIG_PATH:-}"
  export LD_LIBRARY_PATH="$FLATSTATE_DEPS/lib:$FLATSTATE_DEPS/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
if [[ -n "${GTEST_SOURCE_DIR:-}" ]]; then
  args+=(-DFLATSTATE_GTEST_SOURCE_DIR="$(realpath "$GTEST_SOURCE_DIR")")
fi
if [[ -z "${BENCH:-}" ]]; then
  BENCH=OFF
  for d in /usr/lib/x86_64-linux-gnu/cmake/benchmark /usr/lib/cmake/benchmark \
           /usr/local/lib/cmake/benchmark "${FLATSTATE_DEPS:-/nonexistent}/lib/cmake/benchmark"; do
    [[ -f "$d/benchmarkConfig.cmake" ]] && BENCH=ON
  done
fi
args+=(-DFLATSTATE_BUILD_BENCH="$BENCH")

echo "gpu_build: cmake -S . -B $BUILD ${args[*]}"
cmake -S . -B "$BUILD" "${args[@]}"
cmake --build "$BUILD" -j "$JOBS"

if [[ "${RUN_TESTS:-1}" != 0 ]]; then
  # Every test; CUDA instances print "no CUDA GPU visible: ..." and count as skipped when no GPU
  # is visible. Then the CUDA-only suites again, verbosely, so skips cannot hide.
  (cd "$BUILD" && ctest --output-on-failure -j "$JOBS") || status=$?
  (cd "$BUILD" && ctest --output-on-failure -R 'cuda|Cuda' -V | grep -E "SKIPPED|PASSED|FAILED|no CUDA GPU" | tail -40) || true
  echo "gpu_build: bench binary: $BUILD/bench/flatstate-bench (BENCH=$BENCH); see docs/gpu.md"
  exit "${status:-0}"
fi
