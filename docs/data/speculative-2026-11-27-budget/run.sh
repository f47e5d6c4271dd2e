#!/bin/bash
# Probe budget (a pause lasts >= (cost[1] - 1) / 0.03 steps) against the pacer before it,
# interleaved: OLD = a90fcae (pauses of 1, 2, 4, ... steps, one-token probes), NEW = 828e3bb (the floor only after a refused probe; log-floor-on-every-pause.txt: 8ca8f46, the floor on every pause);
# both Release builds (OLD from a clone of a90fcae). Same models, prompts and settings as 2026-11-27-probe.
OLD=${OLD:-/tmp/spec-a90-bench}
NEW=${NEW:-build/bench/flatstate-speculative-bench}
cd "$(dirname "$0")/../../.."
for m in shakespeare-softmax shakespeare-linear-elu shakespeare-gated-deltanet; do
  for b in OLD NEW; do
    echo "== $b $m: uptime $(uptime | sed 's/.*load/load/')"
    ${!b} models/$m bench/data/speculative_repeat.txt 256 5 1 3
  done
done
for ids in plain repeat; do
  for b in OLD NEW; do
    echo "== $b llama340 $ids: uptime $(uptime | sed 's/.*load/load/')"
    ${!b} /tmp/spec-llama340 docs/data/speculative-2026-11-26/speculative_$ids.ids 300 5 1 1 bf16
  done
done
