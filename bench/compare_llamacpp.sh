#!/usr/bin/env bash
# flatstate against llama.cpp on the GPT-2-small width, CPU, back to back in one run (issue 15;
# results and how to build llama.cpp offline: docs/benchmarks.md "llama.cpp side by side").
#
#   bash bench/compare_llamacpp.sh LLAMA_BUILD_DIR [OUT_DIR]
#
# LLAMA_BUILD_DIR: a llama.cpp CMake build holding bin/llama-bench and bin/llama-quantize.
# llama.cpp is a benchmark dependency only: nothing in flatstate's build or tests needs it.
# Needs build/bench/flatstate-bench (cmake --build build --target flatstate-bench).
#
# 1. GGUFs in $GGUF_DIR (default /tmp/flatstate-llama; reused when present): tools/export_gguf.py
#    writes the F32 llama-architecture model (random weights, 113.7 M parameters), llama-quantize
#    makes BF16 and Q8_0 from it.
# 2. For each weight type pair (flatstate f32 / bf16 / int8 vs llama.cpp F32 / BF16 / Q8_0),
#    llama-bench then flatstate-bench, with `uptime` before and after each:
#      decode at batch 1, 1 and 2 threads   llama-bench -n 64 (tg64 from depth 0) |
#                                           Decode/<model>/<type>/threads:T/batch:1
#      prefill 512 (1 and 2 threads) and 4096 (PP4096_THREADS, default 2)
#                                           llama-bench -p N | Prefill/<model>/<type>/threads:T/len:N
#      decode at depth 0 / 1k / 16k, 2 threads
#                                           llama-bench -n 32 -d N |
#                                           DecodeAtContext/<model>/<type>/threads:2/ctx:N
#    Every case runs REPS times (default 3: llama-bench -r, --benchmark_repetitions).
# 3. tools/compare_llamacpp_table.py prints the table (fastest repetition per case) with the
#    ratios per token and per parameter, and writes OUT_DIR/table.csv.
#
# Raw outputs in OUT_DIR (default /tmp/compare-llamacpp-<UTC time>): llama-<TYPE>-*.json,
# flatstate-<type>.json, *.txt (the programs' own tables), machine.txt, run.log, table.md.
# Env: REPS, TYPES (default "f32 bf16 int8"), PP4096_THREADS ("2" or "1 2"), DEPTHS (default
# "1024 16384"; depth 0 always runs), GGUF_DIR,
# FLATSTATE_BENCH (default build/bench/flatstate-bench), PYTHON (default /usr/bin/python3),
# FLATSTATE_BENCH_KV_DTYPE (f32 default, or bf16: flatstate's softmax K/V cache; llama.cpp's is
# f16 at its defaults).
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
PP4096_THREADS="${PP4096_THREADS:-2}"
DEPTHS="${DEPTHS:-1024 16384}"
GGUF_DIR="${GGUF_DIR:-/tmp/flatstate-llama}"
FLATSTATE_BENCH="${FLATSTATE_BENCH:-build/bench/flatstate-bench}"
PYTHON="${PYTHON:-/usr/bin/python3}"
for exe in "$LLAMA_BIN/llama-bench" "$LLAMA_BIN/llama-quantize" "$FLATSTATE_BENCH"; do
  [[ -x "$exe" ]] || { echo "error: $exe not found (see the header of $0)" >&2; exit 1; }
done
mkdir -p "$OUT" "$GGUF_DIR"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/run.log"; }
load() { log "uptime: $(uptime)"; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "flatstate: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "llama-bench: $("$LLAMA_BIN/llama-bench" --version 2>&1 | head -1 || true)"
  echo "flatstate K/V cache: ${FLATSTATE_BENCH_KV_DTYPE:-f32}"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|L2|L3)'
  grep -m1 -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo || echo "no avx512_bf16"
  free -g | head -2
} >"$OUT/machine.txt"
cat "$OUT/machine.txt"

# 1. The GGUFs.
F32_GGUF="$GGUF_DIR/gpt2-small-width-F32.gguf"
if [[ ! -s "$F32_GGUF" ]]; then
  log "writing $F32_GGUF"
  "$PYTHON" tools/export_gguf.py --out "$F32_GGUF" | tee -a "$OUT/run.log"
fi
declare -A LLAMA_TYPE=([f32]=F32 [bf16]=BF16 [int8]=Q8_0)
for t in $TYPES; do
  lt="${LLAMA_TYPE[$t]}"
  g="$GGUF_DIR/gpt2-small-width-$lt.gguf"
  if [[ "$lt" != F32 && ! -s "$g" ]]; then
    log "llama-quantize -> $g"
    "$LLAMA_BIN/llama-quantize" "$F32_GGUF" "$g" "$lt" >>"$OUT/run.log" 2>&1
  fi
done

# 2. Back to back, per weight type.
# What the machine gives right now: one thread's read bandwidth, and the layer GEMMs alone at batch
# 1 (bandwidth-bound) and 64 (compute-bound), 1 and 2 threads.
load
"$FLATSTATE_BENCH" \
  --benchmark_filter='^(MemoryReadBandwidth|GemmModel/(f32|bf16|int8)/best/threads:[12]/batch:(1|64)/)' \
  --benchmark_out="$OUT/flatstate-reference.json" --benchmark_out_format=json \
  2>>"$OUT/run.log" | tee "$OUT/flatstate-reference.txt"
for t in $TYPES; do
  lt="${LLAMA_TYPE[$t]}"
  g="$GGUF_DIR/gpt2-small-width-$lt.gguf"
  lb() {  # llama-bench NAME ARGS...: JSON to llama-$lt-NAME.json, its table to .txt
    local name="$1"; shift
    load
    log "llama-bench $lt $name: $*"
    "$LLAMA_BIN/llama-bench" -m "$g" -r "$REPS" "$@" -o json >"$OUT/llama-$lt-$name.json" \
      2>>"$OUT/run.log"
    "$PYTHON" - "$OUT/llama-$lt-$name.json" <<'EOF' | tee "$OUT/llama-$lt-$name.txt"
import json, sys
for r in json.load(open(sys.argv[1])):
    print(f"{r['model_type']:>22} t={r['n_threads']} pp={r['n_prompt']} tg={r['n_gen']} "
          f"d={r['n_depth']} fa={r.get('flash_attn')} type_k={r.get('type_k')} "
          f"{r['avg_ts']:.2f} +- {r['stddev_ts']:.2f} tok/s {['%.2f' % x for x in r['samples_ts']]}")
EOF
  }
  lb decode-pp512 -t 1,2 -p 512 -n 64
  lb pp4096 -t "${PP4096_THREADS// /,}" -p 4096 -n 0
  lb depth -t 2 -p 0 -n 32 -d "${DEPTHS// /,}"
  load

  pp4096="threads:(${PP4096_THREADS// /|})/len:4096"
  filter="^(Decode/gpt2-small-[a-z_]+/$t/threads:[12]/batch:1/"
  filter+="|Prefill/gpt2-small-[a-z_]+/$t/(threads:[12]/len:512|$pp4096)/"
  filter+="|DecodeAtContext/gpt2-small-[a-z_]+/$t/threads:2/ctx:(0|${DEPTHS// /|})/)"
  log "flatstate-bench $t: $filter"
  "$FLATSTATE_BENCH" --benchmark_filter="$filter" --benchmark_repetitions="$REPS" \
    --benchmark_out="$OUT/flatstate-$t.json" --benchmark_out_format=json \
    2>>"$OUT/run.log" | tee "$OUT/flatstate-$t.txt"
  load
done

# 3. The table.
"$PYTHON" tools/compare_llamacpp_table.py "$OUT" | tee "$OUT/table.md"
log "raw outputs in $OUT"
