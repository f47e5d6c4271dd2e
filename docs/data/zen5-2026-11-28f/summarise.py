#!/usr/bin/env python3
"""Table of ratio.sh's output: per model, type and arm, the batch-1 and batch-32 step medians
over rounds and the ratio 32 * t1 / t32 (batch 32's tokens/s over batch 1's) per round: its
median, min and max. Usage: summarise.py out.txt"""
import collections
import statistics
import sys

rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    if line.startswith('#') or not line.strip():
        continue
    r, model, dtype, arm, batch, ms = line.split()
    rows[(model, dtype, arm)].setdefault(r, {})[batch] = float(ms)
print('| model | type | arm | batch 1 ms (median) | batch 32 ms (median) | ratio median | min | max |')
print('|---|---|---|---|---|---|---|---|')
for (model, dtype, arm), rounds in rows.items():
    full = [v for v in rounds.values() if '1' in v and '32' in v]
    ratios = [32 * v['1'] / v['32'] for v in full]
    t1 = statistics.median(v['1'] for v in full)
    t32 = statistics.median(v['32'] for v in full)
    print(f'| {model} | {dtype} | {arm} | {t1:.2f} | {t32:.1f} | {statistics.median(ratios):.1f}x '
          f'| {min(ratios):.1f}x | {max(ratios):.1f}x |')
