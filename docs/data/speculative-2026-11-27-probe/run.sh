#!/bin/bash
# One-token probes against the longest-draft probes, interleaved: OLD = 502e4b9 (a probe drafts
# the longest length), NEW = this change (a probe drafts one token); both the Release build of
# /work/main (OLD's binary copied aside before the change was built).
OLD=${OLD:-/tmp/spec-old-bench}
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
