#!/bin/bash
# Batch 32 against batch 1, 2 threads, for two builds (issue 30): for each round, model and type,
# each arm runs its batch-1 row and then its batch-32 row back to back (--benchmark_repetitions=3,
# median), the arms alternating, so that the VM's drift (20-30 % between minutes) falls on both
# rows of a ratio alike. Prints "round model type arm batch median_ms"; summarise.py makes the
# table.
#   A=build/bench/flatstate-bench B=<older flatstate-bench> ROUNDS=3 \
#     bash docs/data/zen5-2026-11-28f/ratio.sh > out.txt
# Checkpoints as in docs/data/zen5-2026-11-27 (random weights, upstream layout).
set -eu
RWKV=${RWKV:-/tmp/fs-rwkv7-01b/rwkv7-0.1b}
RWKV4=${RWKV4:-/tmp/fs-rwkv7-04b/rwkv7-0.4b}
MAMBA=${MAMBA:-/tmp/fs-mamba2-130m/mamba2-130m}
MODELS=${MODELS:-rwkv7-0.1b rwkv7-0.4b mamba2-130m}
TYPES=${TYPES:-f32 bf16 bf16dot int8}
A=${A:-build/bench/flatstate-bench}
export FLATSTATE_BENCH_MODELS="$RWKV,$RWKV4,$MAMBA"
median() {  # $1: binary, $2: model, $3: type, $4: batch
  "$1" --benchmark_filter="^Decode/$2/$3/threads:2/batch:$4/" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true 2>/dev/null | awk '/_median/ {print $2}'
}
for r in $(seq 1 "${ROUNDS:-3}"); do
  echo "# round $r $(date -u +%Y-%m-%dT%H:%M:%S) $(uptime | sed 's/.*load/load/')"
  for m in $MODELS; do
    for t in $TYPES; do
      for arm in A ${B:+B}; do
        bin=${!arm}
        for b in 1 32; do echo "$r $m $t $arm $b $(median "$bin" "$m" "$t" "$b")"; done
      done
    done
  done
done
