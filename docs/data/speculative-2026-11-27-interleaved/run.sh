#!/bin/bash
# flatstate-speculative-bench with its rounds interleaved (every mode once per round, medians of
# the rounds): the same models, prompts and settings as speculative-2026-11-27-probe/run.sh, each
# byte-level model three times, the 340 M Llama once per prompt.
BENCH=${BENCH:-build/bench/flatstate-speculative-bench}
cd "$(dirname "$0")/../../.."
for rep in 1 2 3; do
  for m in shakespeare-softmax shakespeare-linear-elu shakespeare-gated-deltanet; do
    echo "== $m (run $rep): uptime $(uptime | sed 's/.*load/load/')"
    $BENCH models/$m bench/data/speculative_repeat.txt 256 5 1 5
  done
done
for ids in plain repeat; do
  echo "== llama340 $ids: uptime $(uptime | sed 's/.*load/load/')"
  $BENCH /tmp/spec-llama340 docs/data/speculative-2026-11-26/speculative_$ids.ids 300 5 1 3 bf16
done
