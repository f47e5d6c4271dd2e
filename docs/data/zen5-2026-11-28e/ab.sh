#!/bin/bash
# Batch 32 with the step split among the threads (engine/runtime/batch_split.h) against the same
# binary with FLATSTATE_SPLIT_STEPS=0 (each op on the pool, as before), 2 threads, ROUNDS rounds
# alternating the two, each row --benchmark_repetitions=3 (median); batch 1 (never split: one
# row) once per round. The VM's speed drifts 20-30 % between minutes, so the arms alternate.
#   BIN=build/bench/flatstate-bench ROUNDS=3 TYPES='bf16|bf16dot' \
#     bash docs/data/zen5-2026-11-28e/ab.sh
# Checkpoints as in docs/data/zen5-2026-11-27 (random weights, upstream layout).
set -eu
RWKV=${RWKV:-/tmp/fs-rwkv7-01b/rwkv7-0.1b}
RWKV4=${RWKV4:-/tmp/fs-rwkv7-04b/rwkv7-0.4b}
MAMBA=${MAMBA:-/tmp/fs-mamba2-130m/mamba2-130m}
MODELS=${MODELS:-rwkv7-0.1b|rwkv7-0.4b|mamba2-130m}
TYPES=${TYPES:-bf16|bf16dot}
BIN=${BIN:-build/bench/flatstate-bench}
export FLATSTATE_BENCH_MODELS="$RWKV,$RWKV4,$MAMBA"
run() {  # $1: batch; prints "name median_ms"
  "$BIN" --benchmark_filter="^Decode/($MODELS)/($TYPES)/threads:2/batch:$1/" \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
    awk '/_median/ {sub("/real_time_median", "", $1); print $1, $2}'
}
for r in $(seq 1 "${ROUNDS:-3}"); do
  echo "== round $r $(date -u +%Y-%m-%dT%H:%M:%S) $(uptime | sed 's/.*load/load/')"
  run 1 | sed 's/^/b1 /'
  FLATSTATE_SPLIT_STEPS=1 run 32 | sed 's/^/split /'
  FLATSTATE_SPLIT_STEPS=0 run 32 | sed 's/^/pool /'
done
