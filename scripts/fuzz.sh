#!/usr/bin/env bash
# Builds the libFuzzer targets in build-asan/ (scripts/asan_configure.sh: clang + ASan + UBSan,
# the build scripts/sanitize.sh runs the tests in, so after it only the fuzzers' own files
# compile) and runs each one for FUZZ_SECONDS (default 60) from its seed corpus in
# tests/fuzz/corpus/<name>, FUZZ_JOBS of them at once (default: one per core; each fuzzer is one
# process on one core, so two cores run two for the time of one). Fails on any crash, leak or
# sanitizer report. request_fuzzer, redis_record_fuzzer and http_body_fuzzer need the server
# (gRPC ON).
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh   for a longer run.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${FUZZ_SECONDS:-60}"
source scripts/asan_configure.sh
asan_configure
B="$ASAN_DIR"
targets=(safetensors_fuzzer config_fuzzer weight_index_fuzzer checkpoint_fuzzer detokenizer_fuzzer
  rwkv_vocab_fuzzer
  tokenizer_json_fuzzer template_fuzzer grammar_fuzzer)
[[ -f tests/fuzz/request_fuzzer.cc ]] && grep -q "FLATSTATE_WITH_GRPC:BOOL=ON" "$B/CMakeCache.txt" && targets+=(request_fuzzer redis_record_fuzzer http_body_fuzzer)
cmake --build "$B" -j "${FLATSTATE_JOBS:-$(nproc)}" --target "${targets[@]}"
JOBS="${FUZZ_JOBS:-$(nproc)}"
# Runs one fuzzer from a copy of its seed corpus; its output goes to $B/<target>.log, its exit
# status to $B/<target>.rc.
run_fuzzer() {
  local t="$1" work
  work="$(mktemp -d)"
  cp -r "tests/fuzz/corpus/${t%_fuzzer}/." "$work/" 2>/dev/null || true
  local rc=0
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$B/tests/fuzz/$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$B/$t-" "$work" > "$B/$t.log" 2>&1 || rc=$?
  rm -rf "$work"
  echo "$rc" > "$B/$t.rc"
}
for t in "${targets[@]}"; do
  rm -f "$B/$t.rc"
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  run_fuzzer "$t" &
done
wait
status=0
for t in "${targets[@]}"; do
  echo "== $t: ${SECONDS_EACH}s =="
  if [[ "$(cat "$B/$t.rc" 2>/dev/null)" != 0 ]]; then
    echo "FAIL: $t (log $B/$t.log)"; tail -40 "$B/$t.log"; status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$B/$t.log" || true
  fi
done
exit $status
