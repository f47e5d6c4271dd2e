#!/usr/bin/env bash
# flatstate against llama.cpp on the CPU, back to back in one run (issue 15, issue 26; results and
# how to build llama.cpp offline: docs/benchmarks.md "llama.cpp side by side").
#
#   bash bench/compare_llamacpp.sh LLAMA_BUILD_DIR [OUT_DIR]
#   SAME_CHECKPOINT=1 bash bench/compare_llamacpp.sh LLAMA_BUILD_DIR [OUT_DIR]
#
# LLAMA_BUILD_DIR: a llama.cpp CMake build holding bin/llama-bench and bin/llama-quantize.
# llama.cpp is a benchmark dependency only: nothing in flatstate's build or tests needs it.
# Needs build/bench/flatstate-bench (cmake --build build --target flatstate-bench).
#
# Two row sets:
# - default (issue 15): the GPT-2-small width. flatstate runs its own GPT-2-small-shaped models
#   (gpt2-small-linear_elu, gpt2-small-softmax); llama.cpp a llama-architecture GGUF of the same
#   width (tools/export_gguf.py: random F32 weights, 113.7 M parameters against flatstate's 85.4 M,
#   hence the per-parameter ratios), in $GGUF_DIR (default /tmp/flatstate-llama; reused).
# - SAME_CHECKPOINT=1 (issue 26): both engines run the same Hugging Face LlamaForCausalLM
#   checkpoint. tools/hf_llama.py writes it (random bf16 weights, shape SAME_HF_ARGS, default a
#   ~0.34 B model: hidden 1024, MLP 2816, 24 layers, 16 heads, 4 K/V heads (GQA), head_dim 64,
#   the tokenizer trained on tiny-Shakespeare at its largest vocabulary, 33,799) into
#   $CKPT_DIR/$CKPT_NAME (default /tmp/flatstate-llama-same/hf-llama; reused while
#   $CKPT_DIR/hf_args.txt matches SAME_HF_ARGS); llama.cpp's own convert_hf_to_gguf.py makes the
#   F32 GGUF exactly as tools/llamacpp_parity.sh runs it (its step-2 block, read out of that
#   script: the transformers stand-in and the float8 shim; LLAMA_SRC is the llama.cpp source tree,
#   default LLAMA_BUILD_DIR/..); flatstate-bench loads the folder itself
#   (FLATSTATE_BENCH_COMPARE_MODELS). No prefill of 4096 in this set. SAME_WRITER (default
#   hf_llama.py) picks another family's writer in tools/ (hf_mamba2.py, hf_rwkv7.py, hf_qwen35.py),
#   SAME_HF_ARGS its flags (set both, and a CKPT_DIR of its own).
#
# 1. The F32 GGUF as above; llama-quantize makes BF16 and Q8_0 from it.
# 2. For each weight type pair (flatstate f32 / bf16 / int8 vs llama.cpp F32 / BF16 / Q8_0),
#    llama-bench then flatstate-bench, with `uptime` before and after each:
#      decode at batch 1, 1 and 2 threads   llama-bench -n 64 (tg64 from depth 0) |
#                                           Decode/<model>/<type>/threads:T/batch:1
#      prefill 512 (1 and 2 threads) and, default set only, 4096 (PP4096_THREADS, default 2)
#                                           llama-bench -p N | Prefill/<model>/<type>/threads:T/len:N
#      decode at depth 0 and DEPTHS, 2 threads
#                                           llama-bench -n 32 -d N |
#                                           DecodeAtContext/<model>/<type>/threads:2/ctx:N
#    Every case runs REPS times (default 3), interleaved: REPS rounds, each one repetition of every
#    llama-bench case then of every flatstate-bench row (files *.rN.json), so that a slow minute
#    on a shared machine hits both engines alike. INTERLEAVE=0: llama-bench -r REPS, then
#    flatstate-bench --benchmark_repetitions=REPS (the runs before issue 33).
# 3. tools/compare_llamacpp_table.py prints the table (median of the repetitions per case; the
#    CSV has the fastest beside it) with the ratios per token and per parameter, and the bandwidth
#    probe's fastest row per thread count (REFERENCE=1), and writes OUT_DIR/table.csv.
#
# Instruction sets (issue 33): machine.txt records the CPU's vector flags. FLATSTATE_ISA=avx2 runs
# flatstate's AVX2 bodies on an AVX-512 machine (kernels/gemm.h); pair it with a llama.cpp built
# for AVX2 only (docs/benchmarks.md: -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF ...) to
# measure the AVX2 table on any x86 machine.
#
# Raw outputs in OUT_DIR (default /tmp/compare-llamacpp-<UTC time>): llama-<TYPE>-*.json,
# flatstate-<type>.json, *.txt (the programs' own tables), machine.txt, run.log, table.md.
# Env: REPS, TYPES (default "f32 bf16 int8"), PP4096_THREADS ("2" or "1 2"; default set only),
# DEPTHS (default "1024 16384", SAME_CHECKPOINT=1: "16384"; set empty: depth 0 only, which always
# runs), PP4096_THREADS (SAME_CHECKPOINT=1: unset, no 4096 prefill unless given), GGUF_DIR,
# SAME_CHECKPOINT, SAME_WRITER, SAME_HF_ARGS, CKPT_DIR, CKPT_NAME, LLAMA_SRC, REFERENCE (1: first the memory
# bandwidth and GEMM reference rows; 0 skips them),
# FLATSTATE_BENCH (default build/bench/flatstate-bench), PYTHON (default /usr/bin/python3),
# INTERLEAVE (default 1), FLATSTATE_ISA (passed to flatstate-bench),
# FLATSTATE_BENCH_KV_DTYPE (f32 default, or bf16: flatstate's softmax K/V cache; llama.cpp's is
# f16 at its defaults).
# FLATSTATE_BENCH_HEAD_DTYPE (unset: the engine's default head; same: the head at each row's
# weight type, as llama.cpp's files hold it; bench/compare_bench.cc).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -lt 1 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
  exit 2
fi
LLAMA_BIN="$1/bin"
OUT="${2:-/tmp/compare-llamacpp-$(date -u +%Y%m%dT%H%M%SZ)}"
REPS="${REPS:-3}"
TYPES="${TYPES:-f32 bf16 int8}"
SAME_CHECKPOINT="${SAME_CHECKPOINT:-0}"
REFERENCE="${REFERENCE:-1}"
INTERLEAVE="${INTERLEAVE:-1}"
if [[ "$SAME_CHECKPOINT" == 1 ]]; then
  PP4096_THREADS="${PP4096_THREADS:-}"  # none unless asked: a 4096 prefill of ~0.5 B is minutes
  DEPTHS="${DEPTHS-16384}"              # set but empty: depth 0 only
  # The largest vocabulary python3-sentencepiece's BPE trainer accepts on tiny-Shakespeare (with
  # tools/hf_llama.py's trainer settings; more is refused: "Please set it to a value <= 33799").
  SAME_HF_ARGS="${SAME_HF_ARGS:---vocab_size 33799 --hidden_size 1024 --intermediate_size 2816 \
--num_hidden_layers 24 --num_attention_heads 16 --num_key_value_heads 4 --head_dim 64 \
--max_position_embeddings 32768 --dtype bfloat16 --seed 1}"
  SAME_WRITER="${SAME_WRITER:-hf_llama.py}"
  CKPT_DIR="${CKPT_DIR:-/tmp/flatstate-llama-same}"
  CKPT_NAME="${CKPT_NAME:-hf-llama}"
  LLAMA_SRC="${LLAMA_SRC:-$1/..}"
else
  PP4096_THREADS="${PP4096_THREADS:-2}"
  DEPTHS="${DEPTHS:-1024 16384}"
fi
GGUF_DIR="${GGUF_DIR:-/tmp/flatstate-llama}"
FLATSTATE_BENCH="${FLATSTATE_BENCH:-build/bench/flatstate-bench}"
PYTHON="${PYTHON:-/usr/bin/python3}"
for exe in "$LLAMA_BIN/llama-bench" "$LLAMA_BIN/llama-quantize" "$FLATSTATE_BENCH"; do
  [[ -x "$exe" ]] || { echo "error: $exe not found (see the header of $0)" >&2; exit 1; }
done
mkdir -p "$OUT"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/run.log"; }
load() { log "uptime: $(uptime)"; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "flatstate: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "llama-bench: $("$LLAMA_BIN/llama-bench" --version 2>&1 | head -1 || true)"
  echo "flatstate K/V cache: ${FLATSTATE_BENCH_KV_DTYPE:-f32}"
  echo "flatstate output head: ${FLATSTATE_BENCH_HEAD_DTYPE:-(unset: the engine default)}"
  if [[ "$SAME_CHECKPOINT" == 1 ]]; then
    echo "same checkpoint: $CKPT_DIR/$CKPT_NAME (tools/$SAME_WRITER $SAME_HF_ARGS)"
  fi
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|L2|L3)'
  echo "vector flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -E '^(avx|avx2|fma|f16c|avx512[a-z_0-9]*|avx_vnni|amx_[a-z0-9]+)$' | tr '\n' ' ')"
  echo "FLATSTATE_ISA: ${FLATSTATE_ISA:-(unset: the best bodies)}"
  free -g | head -2
} >"$OUT/machine.txt"
cat "$OUT/machine.txt"

# 1. The GGUFs (and the same checkpoint's folder).
declare -A LLAMA_TYPE=([f32]=F32 [bf16]=BF16 [int8]=Q8_0)
if [[ "$SAME_CHECKPOINT" == 1 ]]; then
  [[ "$CKPT_NAME" =~ ^[A-Za-z0-9_.-]+$ ]] ||
    { echo "error: CKPT_NAME '$CKPT_NAME': letters, digits, '_', '.' and '-' only" >&2; exit 1; }
  HF="$CKPT_DIR/$CKPT_NAME"
  gguf_of() {  # F32 is the name tools/llamacpp_parity.sh's converter step writes
    if [[ "$1" == F32 ]]; then echo "$CKPT_DIR/model-f32.gguf"; else echo "$CKPT_DIR/model-$1.gguf"; fi
  }
  # Written anew (GGUFs included) when the shape asked for is not the one on disk.
  if [[ ! -s "$HF/config.json" ||
        "$(cat "$CKPT_DIR/hf_args.txt" 2>/dev/null)" != "$SAME_HF_ARGS" ]]; then
    rm -rf "$HF" "$CKPT_DIR"/model-*.gguf "$CKPT_DIR/hf_args.txt"
    mkdir -p "$CKPT_DIR"
    log "writing $HF: tools/$SAME_WRITER $SAME_HF_ARGS"
    # shellcheck disable=SC2086
    "$PYTHON" "tools/$SAME_WRITER" --out "$HF" $SAME_HF_ARGS | tee -a "$OUT/run.log"
    echo "$SAME_HF_ARGS" >"$CKPT_DIR/hf_args.txt"
  fi
  F32_GGUF="$(gguf_of F32)"
  if [[ ! -s "$F32_GGUF" ]]; then
    # tools/llamacpp_parity.sh's step 2 (shims, converter command, log), run with its variables:
    # LLAMA (the source tree), OUT (here the checkpoint folder), HF and PY.
    convert=$(sed -n "/^# 2\. llama.cpp's converter/,/^# 3\. /p" tools/llamacpp_parity.sh | sed '$d')
    if [[ "$convert" != *run_convert.py* || "$convert" != *'$OUT/model-f32.gguf'* ]]; then
      echo "error: tools/llamacpp_parity.sh has no step-2 converter block any more" >&2
      exit 1
    fi
    [[ -f "$LLAMA_SRC/convert_hf_to_gguf.py" ]] ||
      { echo "error: $LLAMA_SRC/convert_hf_to_gguf.py not found (set LLAMA_SRC)" >&2; exit 1; }
    # Qwen3.5 / Qwen3-Next folders without MTP layers: the converter's --no-mtp (as
    # tools/llamacpp_parity.sh passes for those families).
    CONVERT_FLAGS=()
    [[ "$SAME_WRITER" == hf_qwen35.py ]] && CONVERT_FLAGS=(--no-mtp)
    log "convert_hf_to_gguf.py --outtype f32 ${CONVERT_FLAGS[*]} -> $F32_GGUF"
    (LLAMA=$(cd "$LLAMA_SRC" && pwd) OUT="$CKPT_DIR" PY="$PYTHON"; eval "$convert") |
      tee -a "$OUT/run.log"
  fi
  # flatstate-bench's rows for the folder (bench/compare_bench.cc), named by its base name.
  export FLATSTATE_BENCH_COMPARE_MODELS="$HF"
  export FLATSTATE_BENCH_COMPARE_DEPTHS="${DEPTHS// /,}"
  MODEL_RE="${CKPT_NAME//./\\.}"
  PP_RE="threads:[12]/len:512"
  if [[ -n "$PP4096_THREADS" ]]; then
    export FLATSTATE_BENCH_COMPARE_PREFILL=512,4096
    PP_RE="(threads:[12]/len:512|threads:(${PP4096_THREADS// /|})/len:4096)"
  fi
else
  mkdir -p "$GGUF_DIR"
  gguf_of() { echo "$GGUF_DIR/gpt2-small-width-$1.gguf"; }
  F32_GGUF="$(gguf_of F32)"
  if [[ ! -s "$F32_GGUF" ]]; then
    log "writing $F32_GGUF"
    "$PYTHON" tools/export_gguf.py --out "$F32_GGUF" | tee -a "$OUT/run.log"
  fi
  MODEL_RE="gpt2-small-[a-z_]+"
  PP_RE="(threads:[12]/len:512|threads:(${PP4096_THREADS// /|})/len:4096)"
fi
for t in $TYPES; do
  lt="${LLAMA_TYPE[$t]}"
  g="$(gguf_of "$lt")"
  if [[ "$lt" != F32 && ! -s "$g" ]]; then
    log "llama-quantize -> $g"
    "$LLAMA_BIN/llama-quantize" "$F32_GGUF" "$g" "$lt" >>"$OUT/run.log" 2>&1
  fi
done

# 2. Back to back, per weight type.
# What the machine gives right now: one thread's read bandwidth, and the layer GEMMs alone at batch
# 1 (bandwidth-bound) and 64 (compute-bound), 1 and 2 threads.
# (GPT-2-small's GEMM shapes in both sets.)
if [[ "$REFERENCE" == 1 ]]; then
  load
  "$FLATSTATE_BENCH" \
    --benchmark_filter='^(MemoryReadBandwidth|MemoryRead/|GemmModel/(f32|bf16|int8)/best/threads:[12]/batch:(1|64)/)' \
    --benchmark_out="$OUT/flatstate-reference.json" --benchmark_out_format=json \
    2>>"$OUT/run.log" | tee "$OUT/flatstate-reference.txt"
fi
# llama-bench TYPE NAME REPS SUFFIX ARGS...: JSON to llama-TYPE-NAME{SUFFIX}.json, its table to
# .txt. A llama-bench that fails (a crash: e.g. an AMX build on a VM that faults on tile
# instructions) is logged and its output kept as .failed; the run goes on, and the table leaves
# those cells out.
lb() {
  local lt="$1" name="$2" reps="$3" suffix="$4" rc=0 g base
  shift 4
  g="$(gguf_of "$lt")"
  base="$OUT/llama-$lt-$name$suffix"
  load
  log "llama-bench $lt $name$suffix: $*"
  "$LLAMA_BIN/llama-bench" -m "$g" -r "$reps" "$@" -o json >"$base.json" 2>>"$OUT/run.log" || rc=$?
  if [[ $rc != 0 ]]; then
    mv "$base.json" "$base.failed"
    log "llama-bench $lt $name FAILED (exit status $rc); its output: $base.failed"
    return 0
  fi
  "$PYTHON" - "$base.json" <<'EOF' | tee "$base.txt"
import json, sys
for r in json.load(open(sys.argv[1])):
    print(f"{r['model_type']:>22} t={r['n_threads']} pp={r['n_prompt']} tg={r['n_gen']} "
          f"d={r['n_depth']} fa={r.get('flash_attn')} type_k={r.get('type_k')} "
          f"{r['avg_ts']:.2f} +- {r['stddev_ts']:.2f} tok/s {['%.2f' % x for x in r['samples_ts']]}")
EOF
}
# flatstate-bench TYPE REPS SUFFIX: its rows for weight type TYPE to flatstate-TYPE{SUFFIX}.json.
fb() {
  local t="$1" reps="$2" suffix="$3" filter
  filter="^(Decode/$MODEL_RE/$t/threads:[12]/batch:1/"
  filter+="|Prefill/$MODEL_RE/$t/$PP_RE/"
  filter+="|DecodeAtContext/$MODEL_RE/$t/threads:2/ctx:(0|${DEPTHS// /|})/)"
  load
  log "flatstate-bench $t$suffix: $filter"
  "$FLATSTATE_BENCH" --benchmark_filter="$filter" --benchmark_repetitions="$reps" \
    --benchmark_out="$OUT/flatstate-$t$suffix.json" --benchmark_out_format=json \
    2>>"$OUT/run.log" | tee "$OUT/flatstate-$t$suffix.txt"
}
# One repetition (INTERLEAVE=0: all of them) of every case of weight type pair t / its llama type.
round() {
  local t="$1" reps="$2" suffix="$3" lt="${LLAMA_TYPE[$1]}"
  lb "$lt" decode-pp512 "$reps" "$suffix" -t 1,2 -p 512 -n 64
  if [[ -n "$PP4096_THREADS" ]]; then
    lb "$lt" pp4096 "$reps" "$suffix" -t "${PP4096_THREADS// /,}" -p 4096 -n 0
  fi
  if [[ -n "$DEPTHS" ]]; then
    lb "$lt" depth "$reps" "$suffix" -t 2 -p 0 -n 32 -d "${DEPTHS// /,}"
  fi
  fb "$t" "$reps" "$suffix"
}
for t in $TYPES; do
  if [[ "$INTERLEAVE" == 1 ]]; then
    for ((i = 1; i <= REPS; i++)); do round "$t" 1 ".r$i"; done
  else
    round "$t" "$REPS" ""
  fi
  load
done

# 3. The table.
"$PYTHON" tools/compare_llamacpp_table.py "$OUT" | tee "$OUT/table.md"
log "raw outputs in $OUT"
