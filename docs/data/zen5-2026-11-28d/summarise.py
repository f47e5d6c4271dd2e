"""Batch-32 / batch-1 ratios from Google Benchmark JSON files of Decode rows (run.sh).

One file: each row's median over its repetitions and the ratio 32 x t1 / t32. Several files
(rounds): per model and type, the median over rounds of each round's ratio, with the lowest and
highest round.
"""
import collections
import json
import statistics
import sys


def medians(path):
    runs = collections.defaultdict(list)
    for b in json.load(open(path))["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        parts = b["run_name"].split("/")  # Decode/<model>/<type>/threads:2/batch:B/real_time
        runs[(parts[1], parts[2], int(parts[4].split(":")[1]))].append(b["real_time"])
    return {key: statistics.median(v) for key, v in runs.items()}


rounds = [medians(p) for p in sys.argv[1:]]
pairs = sorted({(m, d) for r in rounds for m, d, _ in r})
if len(rounds) == 1:
    r = rounds[0]
    print(f"{'model':14} {'type':8} {'b1 ms':>7} {'b32 ms':>7} {'ratio':>6}")
    for m, d in pairs:
        if (m, d, 1) in r and (m, d, 32) in r:
            one, many = r[(m, d, 1)], r[(m, d, 32)]
            print(f"{m:14} {d:8} {one:7.2f} {many:7.2f} {32 * one / many:5.1f}x")
else:
    print(f"{'model':14} {'type':8} {'median ratio':>12} {'lowest':>7} {'highest':>7}  rounds")
    for m, d in pairs:
        ratios = [32 * r[(m, d, 1)] / r[(m, d, 32)] for r in rounds
                  if (m, d, 1) in r and (m, d, 32) in r]
        print(f"{m:14} {d:8} {statistics.median(ratios):11.1f}x {min(ratios):6.1f}x "
              f"{max(ratios):6.1f}x  {len(ratios)}")
