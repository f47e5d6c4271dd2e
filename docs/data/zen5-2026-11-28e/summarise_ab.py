"""Ratios 32 x t1 / t32 per round and their medians, split against pool, from ab.sh's output.

/usr/bin/python3 docs/data/zen5-2026-11-28e/summarise_ab.py ab.txt
"""
import collections
import statistics
import sys

rounds = []  # per round: {(arm, name): ms}
for line in open(sys.argv[1]):
    if line.startswith("== round"):
        rounds.append({})
    elif line.strip() and rounds:
        arm, name, ms = line.split()
        rounds[-1][(arm, name.rsplit("/batch:", 1)[0].split("/threads:")[0])] = float(ms)
ratios = collections.defaultdict(list)
for r in rounds:
    for (arm, name), ms in r.items():
        if arm == "b1":
            continue
        b1 = r.get(("b1", name))
        if b1:
            ratios[(name, arm)].append((b1, ms, 32 * b1 / ms))
print(f"{'model/type':28} {'arm':6} {'median':>7} {'low':>6} {'high':>6}  rounds (b1 ms / b32 ms)")
for (name, arm), v in sorted(ratios.items()):
    rs = [x[2] for x in v]
    each = "  ".join(f"{a:.2f}/{b:.2f}" for a, b, _ in v)
    print(f"{name:28} {arm:6} {statistics.median(rs):6.1f}x {min(rs):5.1f}x {max(rs):5.1f}x  {each}")
