#!/bin/bash
# Batch 32 against batch 1, 2 threads: ROUNDS rounds, each one process running every row
# (--benchmark_repetitions=3, rows one after another), and the ratio 32 x t1 / t32 of each round's
# medians, then the median ratio over the rounds (summarise.py). The VM's speed drifts 20-30 %
# between minutes, so single rounds disagree; the rounds' spread is printed with them.
# (Google Benchmark's random interleaving was tried and not used: it made batch 1 ~35 % slower
# than when its repetitions run back to back, 9.5 against 7 ms on RWKV-7 0.1B bf16.)
# docs/benchmarks.md, "bf16dot: AVX512-BF16's dot product for batched decode".
#   BIN=build/bench/flatstate-bench ROUNDS=4 TYPES='f32|bf16|int8|bf16dot' \
#     bash docs/data/zen5-2026-11-28d/run.sh
# Checkpoints as in docs/data/zen5-2026-11-27 (random weights, upstream layout).
set -eu
here=$(dirname "$0")
RWKV=${RWKV:-/tmp/fs-rwkv7-01b/rwkv7-0.1b}
RWKV4=${RWKV4:-/tmp/fs-rwkv7-04b/rwkv7-0.4b}
MAMBA=${MAMBA:-/tmp/fs-mamba2-130m/mamba2-130m}
MODELS=${MODELS:-rwkv7-0.1b|rwkv7-0.4b|mamba2-130m}
TYPES=${TYPES:-bf16|bf16dot}
dir=$(mktemp -d)
for r in $(seq 1 "${ROUNDS:-4}"); do
  echo "== round $r $(date -u +%Y-%m-%dT%H:%M:%S) $(uptime | sed 's/.*load/load/')"
  FLATSTATE_BENCH_MODELS="$RWKV,$RWKV4,$MAMBA" "${BIN:-build/bench/flatstate-bench}" \
    --benchmark_filter="^Decode/($MODELS)/($TYPES)/threads:2/batch:(1|32)/" \
    --benchmark_repetitions=3 --benchmark_format=json > "$dir/round$r.json" 2>/dev/null
  /usr/bin/python3 "$here/summarise.py" "$dir/round$r.json"
done
echo "== median over rounds"
/usr/bin/python3 "$here/summarise.py" "$dir"/round*.json
rm -rf "$dir"
