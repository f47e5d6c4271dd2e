# Sourced by scripts/sanitize.sh and scripts/fuzz.sh. sanitizer_configure DIR SANITIZERS [ARGS...]
# (re)configures a sanitizer build in DIR: -O1 -g1 (what the sanitizers recommend; line tables are
# all a report needs; half the compile time of -O2 -g), no CUDA, no benchmarks, the compiler from
# CC / CXX, extra CMake arguments from ARGS and FLATSTATE_SAN_CMAKE_ARGS. asan_configure
# configures build-asan/, the one AddressSanitizer + UndefinedBehaviorSanitizer build both scripts
# use (clang, the tests and the libFuzzer targets), so its libraries compile once for the
# sanitizer stage's tests and the fuzzers (docs/reliability.md, "CI time").
ASAN_DIR=build-asan
sanitizer_configure() {
  local dir="$1" san="$2"
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLATSTATE_SANITIZE="$san" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DFLATSTATE_BUILD_BENCH=OFF -DFLATSTATE_WITH_CUDA=OFF -DFLATSTATE_WITH_GRPC=ON \
    "$@" ${FLATSTATE_SAN_CMAKE_ARGS:-} > "$dir.configure.log"
}
# Without tests/system and tests/clients (FLATSTATE_BUILD_SYSTEM_TESTS=OFF): the Release suite
# runs those; here they would spend CI time on process kills and external programs.
asan_configure() {
  CC=clang CXX=clang++ sanitizer_configure "$ASAN_DIR" address,undefined \
    -DFLATSTATE_BUILD_FUZZERS=ON -DFLATSTATE_BUILD_TESTS=ON -DFLATSTATE_BUILD_SYSTEM_TESTS=OFF
}
