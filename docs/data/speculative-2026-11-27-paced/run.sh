#!/bin/bash
# The pacer measured against the one before it, interleaved: OLD = 37b4d12 (DraftPacer by kept
# counts), NEW = this change; both built Release with -DFLATSTATE_WITH_GRPC=OFF
# -DFLATSTATE_WITH_CUDA=OFF in git worktrees (target flatstate-speculative-bench).
OLD=${OLD:-/tmp/wt-old/build/bench/flatstate-speculative-bench}
NEW=${NEW:-/tmp/wt-new/build/bench/flatstate-speculative-bench}
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
