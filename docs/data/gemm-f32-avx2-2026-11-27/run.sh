#!/bin/bash
# The tiled AVX2 f32 GEMM body before (/tmp/fsb-old: the binary of 5c2d1da) and after
# (/tmp/fsb-new: 5c2d1da plus kernels/cpu/gemm_f32_avx2.cc), interleaved, two rounds.
# GemmModel batch 32 is not in the old binary (the bench row was added with the change).
set -u
out=$(dirname "$0")
{ date -u; lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200; uptime; } > "$out/machine.txt"
for round in 1 2; do
  for b in old new; do
    echo "== round $round $b $(date -u +%H:%M:%S)"
    /tmp/fsb-$b --benchmark_filter='GemmModel/(f32|bf16)/best/threads:(1|2)/batch:(8|32|64)' 2>&1 | grep GemmModel
    FLATSTATE_BENCH_MODELS=/tmp/fs-rwkv7-01b/rwkv7-0.1b,/tmp/fs-mamba2-130m/mamba2-130m /tmp/fsb-$b \
      --benchmark_filter='^Decode/(rwkv7-0.1b|mamba2-130m)/(f32|bf16)/threads:2/batch:(1|32)/' 2>&1 | grep Decode
    FLATSTATE_BENCH_COMPARE_MODELS=/tmp/fs-rwkv7-01b/rwkv7-0.1b,/tmp/fs-qwen35-small/qwen35-small \
      FLATSTATE_BENCH_COMPARE_DEPTHS= FLATSTATE_BENCH_COMPARE_PREFILL=512 /tmp/fsb-$b \
      --benchmark_filter='^Prefill/(rwkv7-0.1b|qwen35-small)/(f32|bf16)/threads:2/len:512' 2>&1 | grep Prefill
  done
done
