#!/bin/bash
# Batch 32 against batch 1, 2 threads, BEFORE and AFTER interleaved (docs/benchmarks.md,
# "Batch 32: the sampler's draw without the sort ..."). Usage:
#   BEFORE=<flatstate-bench> AFTER=<flatstate-bench> ROUNDS=2 bash docs/data/zen5-2026-11-28c/run.sh
# Checkpoints as in docs/data/zen5-2026-11-27 (random weights, upstream layout).
set -u
RWKV=${RWKV:-/tmp/fs-rwkv7-01b/rwkv7-0.1b}
MAMBA=${MAMBA:-/tmp/fs-mamba2-130m/mamba2-130m}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for side in BEFORE AFTER; do
    bin=${!side}
    echo "== $side round $r $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
    FLATSTATE_BENCH_MODELS="$RWKV,$MAMBA" "$bin" \
      --benchmark_filter='^Decode/(rwkv7-0.1b|mamba2-130m)/(f32|bf16|int8)/threads:2/batch:(1|32)/' \
      --benchmark_repetitions=3 2>&1 | grep '_median'
  done
done
