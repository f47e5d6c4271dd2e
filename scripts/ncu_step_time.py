#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel gpu__time_duration into per-step kernel time.

    scripts/ncu_step_time.py ncu.csv

ncu.csv is `ncu --csv --metrics gpu__time_duration.sum` over flatstate-bench decode steps
(scripts/gpu_run.sh step ncu). A step starts at each embedding gather (GatherKernel launched with
one row per session; the last-rows gather has the same name, so a step starts at the gather that
many kernels follow before the next one). Prints the median summed kernel time of the whole steps seen,
then the kernels of one step by time. Only complete steps (between two step starts) count.
"""
import csv
import statistics
import sys


def main(path):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "nsecond")
        v = float(r["Metric Value"].replace(",", ""))
        scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}.get(unit, 1e-3)
        rows.append((int(r["ID"]), r["Kernel Name"], v * scale))
    rows.sort()
    if not rows:
        print("no kernels in", path)
        return 1
    # Layer loop: Gather (embeddings), per layer [...], Gather (last rows), norm, head GEMM.
    # The embedding gather is the one followed by the layers (many kernels before the next
    # gather); the last-rows gather is followed by a handful (norm, head) only.
    gathers = [i for i, (_, name, _) in enumerate(rows) if "GatherKernel" in name]
    starts = [g for g, nxt in zip(gathers, gathers[1:]) if nxt - g > 8]
    steps = []
    for a, b in zip(starts, starts[1:]):
        steps.append(rows[a:b])
    if not steps:
        print(f"fewer than two steps among {len(rows)} kernels")
        return 1
    sums = [sum(t for _, _, t in s) for s in steps]
    med = statistics.median(sums)
    print(f"median summed kernel time per step {med:.1f} us over {len(steps)} steps "
          f"({len(steps[0])} kernels per step; min {min(sums):.1f}, max {max(sums):.1f})")
    by_name = {}
    for _, name, t in steps[len(steps) // 2]:
        short = name.split("(")[0][:70]
        n, tot = by_name.get(short, (0, 0.0))
        by_name[short] = (n + 1, tot + t)
    for name, (n, tot) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"{tot:10.1f} us  {n:4d}x  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
