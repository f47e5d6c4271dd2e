#!/bin/bash
# The sampler's own exp and four-chain radix scatter: /tmp/fsb-new (435e345, before) against
# /tmp/fsb-samp (after), interleaved, two rounds: one draw (Sample/) and batch-32 decode, which
# samples at temperature 0.8 (RWKV-7 0.1B: 65,536 tokens; Mamba-2 130M: 50,280).
set -u
out=$(dirname "$0")
{ date -u; lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200; uptime; } > "$out/machine.txt"
for round in 1 2; do
  for b in new samp; do
    echo "== round $round $b $(date -u +%H:%M:%S)"
    /tmp/fsb-$b --benchmark_filter='Sample/vocab:(50257|248320)/spread:(4|80)/top_k:0' 2>&1 | grep Sample
    FLATSTATE_BENCH_MODELS=/tmp/fs-rwkv7-01b/rwkv7-0.1b,/tmp/fs-mamba2-130m/mamba2-130m /tmp/fsb-$b \
      --benchmark_filter='^Decode/(rwkv7-0.1b|mamba2-130m)/(f32|bf16)/threads:2/batch:(1|32)/' 2>&1 | grep Decode
  done
done
