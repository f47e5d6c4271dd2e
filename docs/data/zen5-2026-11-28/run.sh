#!/bin/bash
# Batch 32 against batch 1 (issue 30) before and after be5af99 (AVX-512 GEMM tiles: tail block,
# next-panel prefetch) and 785e1fe (row-wise ops over the pool), on the 2-vCPU Zen 5 EPYC of
# docs/data/zen5-2026-11-27 (same checkpoints: /tmp/fs-rwkv7-01b, /tmp/fs-mamba2-130m, written by
# that folder's run.sh). BEFORE: a flatstate-bench built at da82658; AFTER: one built at 785e1fe.
# Two rounds, the binaries interleaved; GEMMs first (GPT-2-small shapes, kernels alone).
set -u
cd "$(dirname "$0")/../../.."  # the repository
out=docs/data/zen5-2026-11-28
BEFORE=${BEFORE:?flatstate-bench built at da82658}
AFTER=${AFTER:?flatstate-bench built at 785e1fe}
{ date -u; git rev-parse --short HEAD; lscpu | grep -E "Model name|CPU family|^Model:|^CPU\(s\)|L2|L3|Flags" | cut -c1-400; uptime; } > "$out/machine.txt"
for round in 1 2; do
  for which in before after; do
    bin=$BEFORE; [[ $which == after ]] && bin=$AFTER
    echo "== gemm $which round $round $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
    "$bin" --benchmark_filter='^GemmModel/(f32|bf16)/best/threads:(1|2)/batch:(8|32|64)/' 2>&1 | grep -E "^GemmModel"
  done
done > "$out/gemm.txt"
for round in 1 2; do
  for which in before after; do
    bin=$BEFORE; [[ $which == after ]] && bin=$AFTER
    echo "== decode $which round $round $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
    FLATSTATE_BENCH_MODELS=/tmp/fs-rwkv7-01b/rwkv7-0.1b,/tmp/fs-mamba2-130m/mamba2-130m "$bin" \
      --benchmark_filter='^Decode/(rwkv7-0.1b|mamba2-130m)/(f32|bf16|int8)/threads:2/batch:(1|32)/' \
      2>&1 | grep -E "^Decode"
  done
done > "$out/batch32.txt"
