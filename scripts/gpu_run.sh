#!/usr/bin/env bash
# The one-call GPU run: on the GPU machine, from the repository root, with .gpu-bundle/ (made
# here by scripts/gpu_bundle.sh) carried along, runs everything a GPU session must observe and
# writes it under OUT_DIR. Builds nothing. See docs/gpu.md for the device call.
#
#   scripts/gpu_run.sh OUT_DIR
#
# OUT_DIR gets three files (the device tool returns at most 8, 2 folders deep):
#   summary.txt       pass/fail/skip counts per step, the compiled-in paths, the verdict
#   gpu-run.tar.gz    everything: env.txt (nvidia-smi, versions, ldd), tests/<name>.{json,log}
#                     (--gtest_output=json), sanitizer/{memcheck,racecheck}-<test>.log,
#                     bench/bench.{json,log}, smoke/ (server log, smoke.json, <model>.ckpt
#                     for scripts/gpu_server_smoke.py verify on the CPU), steps.tsv, summary.txt
#   run.log           this script's progress
# The tarball is rewritten after every step, so a run cut off at the device's limit still
# returns what it did. A step that fails or times out is recorded and the next one runs; the
# exit status is 0 only if every step passed.
#
# Environment (defaults in brackets):
#   BUNDLE [.gpu-bundle]  WORK [/tmp/flatstate-gpu-run]: where the bundle is unpacked
#   STEPS [env,tests,upstream,smoke,bench,sanitize]: which steps, in this order   BUDGET_S [540]: the
#     whole run's wall time; every step's timeout is cut to what is left (the device allows
#     600 s per command), so the last steps get what the first leave
#   TEST_JOBS [8]  TEST_TIMEOUT_S [240]: test binaries run in parallel, each with this limit
#   SANITIZE_RUNS: space-separated tool:test:gtest_filter (default: memcheck over every CUDA
#     instance of device_kernels_test, device_gemm_test, gated_attention_test,
#     window_attention_test and engine_device_test, racecheck over the kernels' (those four
#     files) and the engine's greedy test per kind)   SANITIZE_TIMEOUT_S [90]: per run
#   BENCH_FILTER ['/threads:1/|Prefill/|DecodeAtContext/|DeviceDecode/']  BENCH_TIMEOUT_S [150]
#   Step ncu (not in the default STEPS): Nsight Compute's gpu__time_duration of every kernel of
#     NCU_STEPS [5] decode steps of each benchmark in NCU_CASES (space-separated names without
#     /real_time) [DeviceDecode/gpt2-small-linear_elu/batch:64/ctx:0], summed per step by
#     scripts/ncu_step_time.py into ncu/<case>.{csv,txt} (NCU_TIMEOUT_S [120] each); NCU_SKIP
#     [150] launches skipped first, NCU_LAUNCHES [120 x NCU_STEPS] profiled, NCU_ENV: more
#     VAR=VALUE words for the benchmark (e.g. FLATSTATE_BENCH_MODELS=... to profile a prefill:
#     a case such as Prefill/<model>/chunked/len:4096/iterations:2, each engine chunk a "step")
#   SERVER_DEVICE [cuda]  CPU_FALLBACK [1]: if the server cannot start on SERVER_DEVICE, run the
#     smoke once more on --device=cpu (to check the run itself; labelled as such)
#   Step sweep (not in the default STEPS): the loadtest's memory sweep against the server on
#     SERVER_DEVICE, with device memory from GetStats (SWEEP_MODELS, SWEEP_CONTEXTS,
#     SWEEP_KV_BLOCKS, SWEEP_TIMEOUT_S; see step_sweep)
#   PYTHON [python3]: needs grpcio and protobuf (smoke), torch (torch)
#   Step upstream (in the default STEPS): tools/gpu_upstream_parity.py, transformers' and fla's
#     own models on every tests/data/hf_* golden folder, into upstream/ (upstream_parity.json,
#     golden/<folder>/golden_upstream.json); fla's source from UPSTREAM_FLA
#     [.upstream/fla.tar.gz, carried: `carry: [".gpu-bundle", ".upstream"]`; made here by
#     `git archive HEAD fla LICENSE | gzip` in a fetched fla-org/flash-linear-attention]
#     (UPSTREAM_TIMEOUT_S [150]; UPSTREAM_ONLY: comma-separated folder names, just these)
#   Step hfbench (not in the default STEPS): a random Qwen3.5-0.8B-shaped checkpoint written there
#     (tools/hf_qwen35.py, HFBENCH_SHAPE), flatstate-bench's Decode rows on it on CUDA (f32, bf16;
#     batch 1/8/32) and transformers (+ fla's kernels, from UPSTREAM_FLA) on the same folder
#     (tools/torch_hf_decode_bench.py), into hfbench/ (HFBENCH_TIMEOUT_S [240]); HFBENCH_FILTER
#     [^Decode/qwen35-08b/(f32|bf16)/threads:1/] picks flatstate's rows (e.g. add
#     |^Prefill/qwen35-08b/chunked/ for the 4096-token prefill), HFBENCH_RECURRENT_FILTER [none]
#     reruns rows with FLATSTATE_CUDA_DELTA_PREFILL=recurrent (kernels/gated_delta.h),
#     HFBENCH_TORCH_BATCHES [1,8,32] transformers' decode batches (empty: its prefill only)
#   Step famprefill (not in the default STEPS): scripts/gpu_family_prefill.sh, GLA-340M- and
#     Mamba-2-130M-shaped folders' CUDA prefill, chunked and token by token, beside transformers
#     (+ fla), into famprefill/ (FAMPREFILL_TIMEOUT_S [240])
#   Step torch (not in the default STEPS; e.g. STEPS=torch in a second call, TORCH_TIMEOUT_S
#     [300]): tools/torch_gpu_bench.py --compile, the PyTorch baseline, into torch/
set -uo pipefail
[[ $# == 1 ]] || { echo "usage: scripts/gpu_run.sh OUT_DIR" >&2; exit 2; }
cd "$(dirname "$0")/.."
ROOT="$PWD"
mkdir -p "$1" && OUT="$(cd "$1" && pwd)"
BUNDLE="${BUNDLE:-.gpu-bundle}"
WORK="${WORK:-/tmp/flatstate-gpu-run}"
STEPS="${STEPS:-env,tests,upstream,smoke,bench,sanitize}"
BUDGET_S="${BUDGET_S:-540}"
TEST_JOBS="${TEST_JOBS:-8}"
TEST_TIMEOUT_S="${TEST_TIMEOUT_S:-240}"
SANITIZE_RUNS="${SANITIZE_RUNS:-memcheck:device_kernels_test:*/cuda memcheck:device_gemm_test:*/cuda \
  memcheck:gated_attention_test:*/cuda memcheck:window_attention_test:*/cuda \
  memcheck:engine_device_test:*/cuda_* racecheck:device_kernels_test:*/cuda \
  racecheck:device_gemm_test:*/cuda racecheck:gated_attention_test:*/cuda \
  racecheck:window_attention_test:*/cuda racecheck:engine_device_test:*GreedyTokensMatchCpu/cuda_*}"
SANITIZE_TIMEOUT_S="${SANITIZE_TIMEOUT_S:-90}"
BENCH_FILTER="${BENCH_FILTER:-/threads:1/|Prefill/|DecodeAtContext/|DeviceDecode/}"
BENCH_TIMEOUT_S="${BENCH_TIMEOUT_S:-150}"
SERVER_DEVICE="${SERVER_DEVICE:-cuda}"
CPU_FALLBACK="${CPU_FALLBACK:-1}"
PYTHON="${PYTHON:-python3}"
HFBENCH_FILTER="${HFBENCH_FILTER:-^Decode/qwen35-08b/(f32|bf16)/threads:1/}"
HFBENCH_RECURRENT_FILTER="${HFBENCH_RECURRENT_FILTER:-}"
HFBENCH_TORCH_BATCHES="${HFBENCH_TORCH_BATCHES-1,8,32}"
START=$SECONDS
R="$WORK/out"          # the results tree, packed into $OUT/gpu-run.tar.gz
B="$WORK/bundle"       # the unpacked bundle
rm -rf "$WORK" && mkdir -p "$R" "$B"
exec > >(tee "$OUT/run.log") 2>&1
log() { printf '[gpu_run %4ds] %s\n' $((SECONDS - START)) "$*"; }
pack() { cp "$OUT/run.log" "$R/run.log" 2>/dev/null; tar -C "$R" -czf "$OUT/gpu-run.tar.gz.tmp" . &&
         mv "$OUT/gpu-run.tar.gz.tmp" "$OUT/gpu-run.tar.gz"; }
left() { echo $((BUDGET_S - (SECONDS - START))); }
limit() { local l; l=$(left); (( l < $1 )) && echo $((l > 5 ? l : 5)) || echo "$1"; }
printf 'step\trc\tseconds\tnote\n' > "$R/steps.tsv"
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >> "$R/steps.tsv"; pack; }

# ---- unpack, libraries, compiled-in paths ---------------------------------------------------
log "unpacking $BUNDLE into $B"
if ! tar -C "$B" -xJf "$BUNDLE/flatstate-gpu.tar.xz" 2>/dev/null; then
  "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$BUNDLE/flatstate-gpu.tar.xz" "$B" || { log "cannot unpack the bundle"; record unpack 1 0; exit 1; }
fi
manifest() { awk -v k="$1" '$1 == k {sub(/^[^ ]+ /, ""); print; exit}' "$B/MANIFEST"; }
cuda_dirs=""
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
  d=""
  for c in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
    [[ -e "$c/$lib" ]] && { d="$c"; break; }
  done
  [[ -n "$d" ]] || d="$(dirname "$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)" 2>/dev/null)"
  [[ -n "$d" && "$d" != . && ":$cuda_dirs:" != *":$d:"* ]] && cuda_dirs="$cuda_dirs:$d"
done
export LD_LIBRARY_PATH="$B/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# libstdc++/libgcc_s of the build machine only where the target's own are older.
if ldd "$B"/bin/* 2>&1 | grep -q 'GLIBCXX.*not found\|libstdc++.*not found'; then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$B/lib-fallback"
  log "target libstdc++ too old or absent: using the bundle's"
fi
log "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
# Tests read models/ and tests/data/ through the source dir compiled in at bundle time, and the
# system tests start the server through its build path: make both paths exist here.
SRC="$(manifest source_dir)"
if [[ "$(realpath -m "$SRC")" != "$(realpath "$ROOT")" ]]; then
  if [[ ! -e "$SRC" ]]; then
    mkdir -p "$(dirname "$SRC")" && ln -s "$ROOT" "$SRC" && log "linked $SRC -> $ROOT"
  elif ! cmp -s "$SRC/models/shakespeare-softmax/config.json" "$ROOT/models/shakespeare-softmax/config.json"; then
    log "WARNING: $SRC exists and is another checkout: tests read models/ from there"
  fi
fi
SERVER_PATH="$(manifest server_binary)"
if [[ ! -x "$SERVER_PATH" ]]; then
  mkdir -p "$(dirname "$SERVER_PATH")" && ln -sfn "$B/bin/flatstate-server" "$SERVER_PATH" &&
    log "linked $SERVER_PATH -> bundle"
fi
pack

# ---- env ----------------------------------------------------------------------------------
step_env() {
  log "env"
  t0=$SECONDS
  {
    echo "== date"; date -u
    echo "== uname"; uname -a
    echo "== os"; cat /etc/os-release 2>/dev/null | head -2
    echo "== nvidia-smi"; nvidia-smi 2>&1 || echo "nvidia-smi: not available"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>&1
    echo "== nvcc"; (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>&1 | tail -2
    echo "== compute-sanitizer"; compute-sanitizer --version 2>&1 | tail -1
    echo "== glibc"; ldd --version 2>&1 | head -1
    echo "== cpu"; nproc; grep -m1 'model name' /proc/cpuinfo
    echo "== python"; "$PYTHON" -c 'import sys, grpc, google.protobuf as p; print(sys.version.split()[0], "grpcio", grpc.__version__, "protobuf", p.__version__)' 2>&1
    "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
    echo "== LD_LIBRARY_PATH"; echo "$LD_LIBRARY_PATH"
    echo "== MANIFEST"; cat "$B/MANIFEST"
    echo "== ldd flatstate-server"; ldd "$B/bin/flatstate-server"
    echo "== ldd device_kernels_test"; ldd "$B/tests/device_kernels_test"
  } > "$R/env.txt" 2>&1
  # Every library must come from the bundle, glibc, or CUDA.
  outside=$(find "$B/bin" "$B/tests" -type f -exec ldd {} + 2>/dev/null | awk '/=>/ {print $1, $3}' |
    sort -u | grep -v -e " $B/" -e '^linux-vdso' -e '^ld-linux' -e '^lib\(c\|m\|pthread\|dl\|rt\|resolv\)\.so' \
      -e '^libcud' -e '^libcublas' -e '^libnvidia' -e '^libstdc++' -e '^libgcc_s' || true)
  { echo "== libraries resolved outside the bundle (glibc, CUDA, libstdc++/libgcc_s excluded)"
    echo "${outside:-none}"; } >> "$R/env.txt"
  nf=$(grep -c 'not found' <<<"$outside")
  record env "$nf" $((SECONDS - t0)) "$( [[ -z "$outside" ]] && echo 'all libraries from the bundle' || echo "outside: $(tr '\n' ' ' <<<"$outside")")"
}

# ---- tests --------------------------------------------------------------------------------
run_test() {  # $1: path under $B/tests; writes $R/tests/<name>.{json,log}
  local name; name="$(basename "$1")"
  timeout -k 5 "$2" "$B/$1" --gtest_output="json:$R/tests/$name.json" > "$R/tests/$name.log" 2>&1
  echo "$name rc=$?"
}
export -f run_test
export B R
step_tests() {
  log "tests: $(cd "$B" && find tests -type f | wc -l) binaries, $TEST_JOBS at a time"
  t0=$SECONDS
  mkdir -p "$R/tests"
  lim=$(limit "$TEST_TIMEOUT_S")
  (cd "$B" && find tests -type f -name '*_test' | sort) |
    xargs -P "$TEST_JOBS" -I{} bash -c "run_test {} $lim" | sort > "$R/tests/rc.txt"
  counts=$("$PYTHON" - "$R/tests" <<'EOF'
import glob, json, os, sys
p = f = s = 0; failed = []; skipped = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for suite in json.load(open(path)).get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f'{suite["name"]}.{t["name"]}'
            if t.get("failures"): f += 1; failed.append(name)
            elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN": s += 1; skipped.append(name)
            else: p += 1
open(os.path.join(sys.argv[1], "failed.txt"), "w").write("\n".join(failed) + "\n")
open(os.path.join(sys.argv[1], "skipped.txt"), "w").write("\n".join(skipped) + "\n")
print(f"passed {p} failed {f} skipped {s}")
EOF
)
  bad=$(grep -vc ' rc=0$' "$R/tests/rc.txt")
  cuda_skips=$(grep -ci 'cuda' "$R/tests/skipped.txt")
  reason=$(grep -ho 'no CUDA GPU visible[^"]*' "$R"/tests/*.log 2>/dev/null | sort | uniq -c | head -3 | tr -s ' ' | tr '\n' ';')
  record tests "$bad" $((SECONDS - t0)) "$counts; binaries with rc!=0: $bad; CUDA tests skipped: $cuda_skips ${reason:+($reason)}"
  log "tests: $counts"
}

# ---- sanitizers ---------------------------------------------------------------------------
step_sanitize() {
  mkdir -p "$R/sanitizer"
  local cs run tool t filter t0
  cs="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)"
  for run in $SANITIZE_RUNS; do
    IFS=: read -r tool t filter <<<"$run"
    t0=$SECONDS
    if [[ -z "$cs" ]]; then
      log "sanitize: compute-sanitizer not found"; record "sanitize-$tool-$t" skipped 0 "compute-sanitizer not found"; continue
    fi
    log "compute-sanitizer --tool $tool $t --gtest_filter=$filter"
    timeout -k 5 "$(limit "$SANITIZE_TIMEOUT_S")" "$cs" --tool "$tool" --error-exitcode 99 \
      "$B/tests/$t" --gtest_filter="$filter" > "$R/sanitizer/$tool-$t.log" 2>&1
    record "sanitize-$tool-$t" "$?" $((SECONDS - t0)) "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|SKIPPED|FAILED  ' "$R/sanitizer/$tool-$t.log" | tail -3 | tr '\n' ' ')"
  done
}

# ---- benchmark ----------------------------------------------------------------------------
step_bench() {
  log "bench: FLATSTATE_BENCH_DEVICE=cuda --benchmark_filter='$BENCH_FILTER'"
  mkdir -p "$R/bench"
  t0=$SECONDS
  FLATSTATE_BENCH_DEVICE=cuda FLATSTATE_BENCH_DIR="$WORK/bench-models" \
    timeout -k 5 "$(limit "$BENCH_TIMEOUT_S")" "$B/bin/flatstate-bench" \
    --benchmark_filter="$BENCH_FILTER" --benchmark_out="$R/bench/bench.json" \
    --benchmark_out_format=json > "$R/bench/bench.log" 2>&1
  rc=$?
  record bench "$rc" $((SECONDS - t0)) "$(grep -c '^Decode\|^Prefill' "$R/bench/bench.log") results; $(tail -1 "$R/bench/bench.log" | cut -c1-160)"
}

# ---- server smoke -------------------------------------------------------------------------
start_server() {  # $1: device, $2: results dir, then server flags; sets pid, port, rc
  local dev=$1 d=$2
  shift 2
  mkdir -p "$d"
  log "flatstate-server --device=$dev $*"
  "$B/bin/flatstate-server" --device="$dev" --port=0 --metrics_port=0 --http_port=0 --models_dir="$ROOT/models" \
    --checkpoint_dir="$WORK/checkpoints-$dev" "$@" > "$d/server.out" 2> "$d/server.log" &
  pid=$!
  port=""
  for _ in $(seq 300); do
    port=$(awk '/^port / {print $2}' "$d/server.out")
    [[ -n "$port" ]] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  wait "$pid"; rc=$?
  return 1
}

smoke() {  # $1: device; results in $R/smoke/$1
  local d="$R/smoke/$1" pid port rc t0=$SECONDS
  if ! start_server "$1" "$d"; then
    record "smoke-$1" $((rc == 0 ? 1 : rc)) $((SECONDS - t0)) "server did not start: $(grep -m1 -i 'error' "$d/server.log" | cut -c1-200)"
    return 1
  fi
  PYTHONPATH="$ROOT/clients/python" FLATSTATE_PYTHON_STUBS="$B/python" PYTHONUNBUFFERED=1 \
    timeout -k 5 "$(limit 120)" "$PYTHON" "$ROOT/scripts/gpu_server_smoke.py" run \
    --server "localhost:$port" --dir "$d" > "$d/smoke.log" 2>&1
  rc=$?
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  record "smoke-$1" "$rc" $((SECONDS - t0)) "$(grep -c ': ok ' "$d/smoke.log") models ok, $(grep -c 'FAILED' "$d/smoke.log") failed"
  return "$rc"
}
# ---- device-memory sweep ----------------------------------------------------------------
# flatstate-loadtest's memory sweep against the server on the GPU (shipped linear_elu and
# softmax models; a KV pool of SWEEP_KV_BLOCKS [1024] blocks so softmax exhausts it at 16k
# tokens): GetStats' device memory (cudaMemGetInfo) at every context, into sweep/memory.csv.
step_sweep() {
  local d="$R/sweep" pid port rc t0=$SECONDS
  if ! start_server "$SERVER_DEVICE" "$d" --kv_blocks="${SWEEP_KV_BLOCKS:-1024}" --log_requests=false; then
    record sweep $((rc == 0 ? 1 : rc)) $((SECONDS - t0)) "server did not start: $(grep -m1 -i 'error' "$d/server.log" | cut -c1-200)"
    return
  fi
  timeout -k 5 "$(limit "${SWEEP_TIMEOUT_S:-120}")" "$B/bin/flatstate-loadtest" \
    --server "127.0.0.1:$port" --deadline 120s --wait_for_server 30s --progress=false --mode memory \
    --models "${SWEEP_MODELS:-shakespeare-linear-elu,shakespeare-softmax}" \
    --contexts "${SWEEP_CONTEXTS:-1k,4k,16k,64k}" --chunk_tokens 4096 --decode_tokens 16 \
    --csv_dir "$d" > "$d/sweep.log" 2>&1
  rc=$?
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  record sweep "$rc" $((SECONDS - t0)) "$(grep -c '^PASS' "$d/sweep.log") checks passed, $(grep -c '^FAIL' "$d/sweep.log") failed; $(grep -m2 'device memory flat' "$d/sweep.log" | cut -c1-150 | tr '\n' ' ')"
}

step_upstream() {  # issue 32 item 2: the upstream implementations on the golden folders
  log "upstream: tools/gpu_upstream_parity.py"
  mkdir -p "$R/upstream"
  local t0=$SECONDS fla="${UPSTREAM_FLA:-.upstream/fla.tar.gz}"
  [[ -e "$fla" ]] || { log "upstream: $fla not carried: fla rows will fail"; fla=""; }
  local lim; lim=$(limit "${UPSTREAM_TIMEOUT_S:-150}")
  # The script's own deadline comes first, so that it still writes what its workers finished.
  PYTHONUNBUFFERED=1 timeout -k 5 "$lim" "$PYTHON" \
    "$ROOT/tools/gpu_upstream_parity.py" --data "$ROOT/tests/data" ${fla:+--fla "$fla"} \
    --timeout $((lim > 40 ? lim - 25 : lim / 2)) ${UPSTREAM_ONLY:+--only "$UPSTREAM_ONLY"} \
    --out "$R/upstream" --golden_dir "$R/upstream/golden" > "$R/upstream/upstream.log" 2>&1
  local rc=$?
  record upstream "$rc" $((SECONDS - t0)) "$(grep -c 'greedy 64/64' "$R/upstream/upstream.log") rows with 64/64 greedy, $(grep -c ' ERROR ' "$R/upstream/upstream.log") errors"
}

HFBENCH_SHAPE="${HFBENCH_SHAPE:---vocab_size 248320 --hidden_size 1024 --intermediate_size 3584 \
  --num_hidden_layers 24 --num_attention_heads 8 --num_key_value_heads 2 --head_dim 256 \
  --linear_num_key_heads 16 --linear_num_value_heads 16 --linear_key_head_dim 128 \
  --linear_value_head_dim 128 --tie_word_embeddings}"
step_hfbench() {  # issue 32 item 3 / issue 29: flatstate and transformers(+fla) on one checkpoint
  local d="$WORK/qwen35-08b" t0=$SECONDS rc fla="${UPSTREAM_FLA:-.upstream/fla.tar.gz}"
  mkdir -p "$R/hfbench"
  log "hfbench: writing $d"
  # shellcheck disable=SC2086
  timeout -k 5 "$(limit 120)" "$PYTHON" "$ROOT/tools/hf_qwen35.py" --out "$d" --family qwen3_5 \
    --tokenizer none $HFBENCH_SHAPE --dtype bfloat16 --seed 1 > "$R/hfbench/write.log" 2>&1 ||
    { record hfbench 1 $((SECONDS - t0)) "writer failed: $(tail -1 "$R/hfbench/write.log")"; return; }
  log "hfbench: flatstate-bench $HFBENCH_FILTER"
  FLATSTATE_BENCH_DEVICE=cuda FLATSTATE_BENCH_MODELS="$d" FLATSTATE_BENCH_DIR="$WORK/bench-models" \
    timeout -k 5 "$(limit 120)" "$B/bin/flatstate-bench" --benchmark_filter="$HFBENCH_FILTER" \
    --benchmark_out="$R/hfbench/flatstate.json" --benchmark_out_format=json \
    > "$R/hfbench/flatstate.log" 2>&1
  rc=$?
  if [[ -n "$HFBENCH_RECURRENT_FILTER" ]]; then  # the same rows with the delta rule's prefill
    log "hfbench: flatstate-bench $HFBENCH_RECURRENT_FILTER, FLATSTATE_CUDA_DELTA_PREFILL=recurrent"
    FLATSTATE_CUDA_DELTA_PREFILL=recurrent FLATSTATE_BENCH_DEVICE=cuda FLATSTATE_BENCH_MODELS="$d" \
      FLATSTATE_BENCH_DIR="$WORK/bench-models" timeout -k 5 "$(limit 120)" \
      "$B/bin/flatstate-bench" --benchmark_filter="$HFBENCH_RECURRENT_FILTER" \
      --benchmark_out="$R/hfbench/flatstate-recurrent.json" --benchmark_out_format=json \
      > "$R/hfbench/flatstate-recurrent.log" 2>&1
    rc=$((rc | $?))
  fi
  log "hfbench: transformers on the same folder"
  [[ -e "$fla" ]] || fla=""
  PYTHONUNBUFFERED=1 timeout -k 5 "$(limit "${HFBENCH_TIMEOUT_S:-240}")" "$PYTHON" \
    "$ROOT/tools/torch_hf_decode_bench.py" --model "$d" ${fla:+--fla "$fla"} \
    --batches "$HFBENCH_TORCH_BATCHES" --out "$R/hfbench/torch.json" > "$R/hfbench/torch.log" 2>&1
  record hfbench $((rc | $?)) $((SECONDS - t0)) "$(grep -c '^Decode/\|^Prefill/' "$R/hfbench/flatstate.log") flatstate rows; $(grep -c tokens_per_s "$R/hfbench/torch.log") torch rows"
}

step_famprefill() {  # issues 29 / 30: the gated linear recurrence's CUDA prefill
  local t0=$SECONDS
  mkdir -p "$R/famprefill"
  log "famprefill: scripts/gpu_family_prefill.sh"
  BIN="$B/bin" WORK="$WORK/famprefill" PYTHON="$PYTHON" timeout -k 5 \
    "$(limit "${FAMPREFILL_TIMEOUT_S:-240}")" bash "$ROOT/scripts/gpu_family_prefill.sh" \
    "$R/famprefill" > "$R/famprefill/log.txt" 2>&1
  record famprefill $? $((SECONDS - t0)) "$(grep -c '^Prefill/' "$R/famprefill/log.txt") flatstate rows"
}

step_torch() {  # not in the default STEPS: the PyTorch baseline of issue 17 item 4
  log "torch: tools/torch_gpu_bench.py --compile"
  mkdir -p "$R/torch"
  local t0=$SECONDS
  PYTHONUNBUFFERED=1 timeout -k 5 "$(limit "${TORCH_TIMEOUT_S:-300}")" "$PYTHON" \
    "$ROOT/tools/torch_gpu_bench.py" --compile --out "$R/torch/torch_bench.json" > "$R/torch/torch.log" 2>&1
  record torch "$?" $((SECONDS - t0)) "$(grep -c '"error"' "$R/torch/torch.log") cases failed, $(grep -c skipped "$R/torch/torch.log") skipped"
}

step_ncu() {  # summed kernel time of decode steps, for bytes per step / kernel time
  local cases="${NCU_CASES:-DeviceDecode/gpt2-small-linear_elu/batch:64/ctx:0}" t0 c name rc
  local ncu; ncu="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
  mkdir -p "$R/ncu"
  [[ -n "$ncu" ]] || { record ncu skipped 0 "ncu not found"; return; }
  for c in $cases; do
    t0=$SECONDS
    name="$(tr '/:' '__' <<<"$c")"
    log "ncu: $c"
    # Skip the first NCU_SKIP launches (about the first step), then profile ~NCU_STEPS steps.
    # Under ncu a step takes ~0.3 s, so the benchmark's 2 s run gives a handful of steps.
    env FLATSTATE_BENCH_DEVICE=cuda FLATSTATE_BENCH_DIR="$WORK/bench-models" ${NCU_ENV:-} \
      timeout -k 5 "$(limit "${NCU_TIMEOUT_S:-120}")" "$ncu" --csv --clock-control none \
      --metrics gpu__time_duration.sum --launch-skip "${NCU_SKIP:-150}" \
      --launch-count "${NCU_LAUNCHES:-$((120 * ${NCU_STEPS:-5}))}" \
      "$B/bin/flatstate-bench" --benchmark_filter="^${c}/real_time\$" --benchmark_min_time=2 \
      > "$R/ncu/$name.csv" 2> "$R/ncu/$name.log"
    rc=$?
    "$PYTHON" "$ROOT/scripts/ncu_step_time.py" "$R/ncu/$name.csv" > "$R/ncu/$name.txt" 2>&1
    record "ncu-$name" "$rc" $((SECONDS - t0)) "$(head -1 "$R/ncu/$name.txt" | cut -c1-200)"
  done
}

step_smoke() {
  smoke "$SERVER_DEVICE"
  if [[ $? != 0 && "$CPU_FALLBACK" == 1 && "$SERVER_DEVICE" != cpu && ! -s "$R/smoke/$SERVER_DEVICE/smoke.json" ]]; then
    log "smoke: --device=$SERVER_DEVICE did not start; checking the run itself on --device=cpu"
    smoke cpu
  fi
}

for s in ${STEPS//,/ }; do
  declare -F "step_$s" >/dev/null || { log "unknown step $s"; record "$s" 2 0 "unknown step"; continue; }
  "step_$s"
done

# ---- summary ------------------------------------------------------------------------------
{
  echo "flatstate gpu_run $(date -u +%Y-%m-%dT%H:%M:%SZ), $((SECONDS - START)) s, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo 'no GPU visible')"
  echo "bundle: $(manifest commit); compiled source dir $(manifest source_dir)"
  column -t -s $'\t' "$R/steps.tsv" 2>/dev/null || cat "$R/steps.tsv"
  failed=$(awk -F'\t' 'NR > 1 && $2 != "0" {print $1}' "$R/steps.tsv" | tr '\n' ' ')
  echo "steps not passed: ${failed:-none}"
} > "$R/summary.txt"
cp "$R/summary.txt" "$OUT/summary.txt"
pack
cat "$OUT/summary.txt"
[[ -z "$(awk -F'\t' 'NR > 1 && $2 != "0"' "$R/steps.tsv")" ]]
