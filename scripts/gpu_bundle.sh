#!/usr/bin/env bash
# Builds, on this machine (no GPU needed), the binaries a GPU run needs (only those), CUDA for
# sm_90 (the H100/H200; kernels/CMakeLists.txt adds sm_80), and packs them with their non-CUDA shared
# libraries into the ignored folder .gpu-bundle/, which travels with the device tool's call
# (`carry: [".gpu-bundle"]`) and is unpacked and run there by scripts/gpu_run.sh. See docs/gpu.md.
#
#   scripts/gpu_bundle.sh            (env: JOBS=2, BUILD=build-gpu-bundle, BUNDLE=.gpu-bundle,
#                                     TESTS: space-separated test binaries to carry, default
#                                     GPU_TESTS below; BINS: the programs, paths under the build
#                                     dir, default server, cli, loadtest and bench)
#
# The checkout itself is ~47 MiB of the device call's 64 MiB, so a bundle of every test binary no
# longer fits beside it: GPU_TESTS (below) names the binaries with CUDA instances, which is what a
# GPU run is for (the CPU instances run in CI). TESTS=all carries every one.
#
# .gpu-bundle/ holds:
#   flatstate-gpu.tar.xz   bin/ (server, cli, loadtest, bench), tests/ (every GoogleTest binary,
#                          by its path under the build dir), python/ (generated flatstate.v1
#                          stubs), lib/ (shared libraries other than glibc's, libstdc++/libgcc_s
#                          and CUDA's), lib-fallback/ (libstdc++, libgcc_s: used only where the
#                          target's own are older), all stripped
#   MANIFEST               build facts gpu_run.sh reads (source dir compiled into the tests,
#                          server path compiled into the system tests, compiler versions,
#                          newest GLIBC symbol version needed) and the file list with sizes
# Fails (exit != 0) if the build fails, a binary needs a library that is not found here, or the
# bundle is over LIMIT_MIB [16] MiB (the device call carries 64 MiB for the whole working tree, ~47 MiB of which is
# the checkout itself).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BUILD="${BUILD:-build-gpu-bundle}"
BUNDLE="${BUNDLE:-.gpu-bundle}"
JOBS="${JOBS:-2}"
LIMIT_MIB="${LIMIT_MIB:-16}"
GPU_TESTS="device_gemm_test device_kernels_test device_recurrent_test engine_device_hf_test
  engine_device_test engine_fork_test engine_kv_dtype_test engine_prefix_cache_test
  engine_stored_quant_test engine_test engine_weight_dtype_test gated_attention_test
  window_attention_test"
TESTS="${TESTS:-$GPU_TESTS}"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
[[ -x "$NVCC" ]] || { echo "gpu_bundle: nvcc not found" >&2; exit 1; }

launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$ROOT")}"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
echo "gpu_bundle: configuring $BUILD (Release, CUDA sm_90, gRPC, bench, tests)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DFLATSTATE_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DFLATSTATE_WITH_GRPC=ON -DFLATSTATE_BUILD_BENCH=ON -DFLATSTATE_BUILD_TESTS=ON \
  > "$BUILD.configure.log"
grep -q 'flatstate: CUDA backend ON' "$BUILD.configure.log" \
  || { echo "gpu_bundle: CMake did not enable CUDA (see $BUILD.configure.log)" >&2; exit 1; }
BINS="${BINS:-server/flatstate-server clients/cli/flatstate-cli clients/loadtest/flatstate-loadtest
  bench/flatstate-bench}"
# Only what the bundle carries is built (TESTS=all: everything), as CMake target names: a test
# binary's target is its name, a program's is its file name, the stubs' flatstate_python_stubs.
targets=(flatstate_python_stubs)
for b in $BINS; do targets+=("$(basename "$b")"); done
if [[ "$TESTS" == all ]]; then targets=(all); else targets+=($TESTS); fi
echo "gpu_bundle: building ${targets[*]} with -j $JOBS"
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,tests,python,lib,lib-fallback}
for b in $BINS; do
  [[ -x "$BUILD/$b" ]] || { echo "gpu_bundle: missing $BUILD/$b" >&2; exit 1; }
  cp "$BUILD/$b" "$stage/bin/"
done
# Every GoogleTest binary ctest knows, keeping its folder under tests/ (tests/server/...).
(cd "$BUILD" && ctest --show-only=json-v1) | python3 -c '
import json, os, sys
build = os.path.realpath(sys.argv[1])
for t in sorted({os.path.realpath(x["command"][0]) for x in json.load(sys.stdin)["tests"]
                 if x.get("command")}):
    if t.startswith(build + "/tests/") and t.endswith("_test"):
        print(os.path.relpath(t, build))' "$BUILD" |
  { if [[ "$TESTS" == all ]]; then cat; else grep -E "/($(echo $TESTS | tr ' ' '|'))\$"; fi; } |
  while read -r t; do mkdir -p "$stage/$(dirname "$t")"; cp "$BUILD/$t" "$stage/$t"; done
cp -r "$BUILD/python/flatstate" "$stage/python/"
find "$stage/bin" "$stage/tests" -type f -exec strip --strip-unneeded {} +

# Shared libraries: everything ldd resolves except glibc's own, the kernel's vDSO and CUDA's
# (the GPU machine's driver and CUDA 13 runtime/cuBLAS are used). libstdc++/libgcc_s go to
# lib-fallback/: gpu_run.sh adds it only if the target's are too old for these binaries.
missing=0
find "$stage/bin" "$stage/tests" -type f -exec ldd {} + 2>/dev/null |
  awk '/=>/ {print $1, $3}' | sort -u > "$stage/ldd.txt"
while read -r name path; do
  case "$name" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*) continue ;;
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libnvidia*) continue ;;
  esac
  if [[ "$path" == "not" || ! -e "$path" ]]; then
    echo "gpu_bundle: $name not found here" >&2; missing=1; continue
  fi
  dest=lib
  case "$name" in libstdc++.so*|libgcc_s.so*) dest=lib-fallback ;; esac
  cp -L "$path" "$stage/$dest/$name"
done < "$stage/ldd.txt"
[[ $missing == 0 ]] || exit 1
find "$stage/lib" "$stage/lib-fallback" -type f -exec strip --strip-unneeded {} +
rm "$stage/ldd.txt"

# Newest versioned glibc / libstdc++ symbols the binaries and carried libraries ask for.
need_glibc="$(find "$stage" -type f \( -path '*/bin/*' -o -path '*/tests/*' -o -path '*/lib/*' \) \
  -exec objdump -T {} + 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
need_cxx="$(find "$stage" -type f \( -path '*/bin/*' -o -path '*/tests/*' -o -path '*/lib/*' \) \
  -exec objdump -T {} + 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"
{
  echo "created $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(. /etc/os-release; echo "$PRETTY_NAME"))"
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "source_dir $ROOT"
  echo "server_binary $ROOT/$BUILD/server/flatstate-server"
  echo "build_dir $ROOT/$BUILD"
  echo "cxx $(c++ --version | head -1)"
  echo "nvcc $("$NVCC" --version | tail -1)"
  echo "cuda_architectures 80;90 (kernels/CMakeLists.txt)"
  echo "glibc_here $(ldd --version | head -1 | awk '{print $NF}')"
  echo "needs_glibc $need_glibc"
  echo "needs_glibcxx $need_cxx"
  echo "files:"
  (cd "$stage" && find . -type f -printf '%s %p\n' | sort -k2)
} > "$BUNDLE/MANIFEST"
cp "$BUNDLE/MANIFEST" "$stage/MANIFEST"
echo "gpu_bundle: compressing"
tar -C "$stage" -cf - . | xz -T"$JOBS" -6 > "$BUNDLE/flatstate-gpu.tar.xz"

raw=$(du -sb "$stage" | cut -f1)
packed=$(stat -c %s "$BUNDLE/flatstate-gpu.tar.xz")
printf 'gpu_bundle: %s: %d files, %.1f MiB stripped, %.1f MiB compressed (limit %d MiB)\n' \
  "$BUNDLE" "$(find "$stage" -type f | wc -l)" "$(echo "$raw / 1048576" | bc -l)" \
  "$(echo "$packed / 1048576" | bc -l)" "$LIMIT_MIB"
(( packed <= LIMIT_MIB * 1048576 )) || { echo "gpu_bundle: bundle over $LIMIT_MIB MiB" >&2; exit 1; }
