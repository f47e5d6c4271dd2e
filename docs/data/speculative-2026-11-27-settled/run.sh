#!/bin/bash
# flatstate-speculative-bench after StepCostModel's settled row counts (kSettled = 3) and with one
# cost model per mode kept across the rounds (as the server keeps one per model): the models,
# prompt and settings of speculative-2026-11-27-interleaved/run.sh (5 rounds per run, medians),
# each byte-level model three times, on the Zen 5 EPYC of zen5-2026-11-27 (machine.txt there).
# "cold" lines: round 1 alone, its cost model unmeasured (a server's first request).
BENCH=${BENCH:-build/bench/flatstate-speculative-bench}
cd "$(dirname "$0")/../../.."
for rep in 1 2 3; do
  for m in shakespeare-softmax shakespeare-linear-elu shakespeare-gated-deltanet; do
    echo "== $m (run $rep): uptime $(uptime | sed 's/.*load/load/')"
    $BENCH models/$m bench/data/speculative_repeat.txt 256 5 1 5
  done
done
