# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: build-asan/ is the one AddressSanitizer +
# UndefinedBehaviorSanitizer build both use (clang, -O1 -g1, the tests and the libFuzzer targets;
# no CUDA, no benchmarks), so its libraries compile once for the sanitizer stage's tests and the
# fuzzers (docs/reliability.md, "CI time"). asan_configure (re)configures it; extra CMake
# arguments come from FLATSTATE_SAN_CMAKE_ARGS.
ASAN_DIR=build-asan
asan_configure() {
  # -O1 -g1: what ASan recommends; line tables are all a report needs.
  CC=clang CXX=clang++ cmake -S . -B "$ASAN_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DFLATSTATE_SANITIZE=address,undefined -DFLATSTATE_BUILD_FUZZERS=ON -DFLATSTATE_BUILD_TESTS=ON \
    -DFLATSTATE_BUILD_BENCH=OFF -DFLATSTATE_WITH_CUDA=OFF -DFLATSTATE_WITH_GRPC=ON \
    ${FLATSTATE_SAN_CMAKE_ARGS:-} > "$ASAN_DIR.configure.log"
}
