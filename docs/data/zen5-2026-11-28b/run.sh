#!/bin/bash
# The 2026-11-27 comparison (../zen5-2026-11-27/run.sh: the same checkpoints, writer arguments,
# parts and environment) rerun on 2026-11-28 with later code, its outputs here or in OUT:
#   A: rwkv7-0.1b/, mamba2-130m/, bf16-reps5/; B: after-ee2826f/; C: final/ (docs/benchmarks.md,
#   "RWKV-7 0.1B and Mamba-2 130M against llama.cpp again").
#   FLATSTATE_BENCH=<bench> PART=rwkv|mamba TYPES="f32 bf16" REPS=3 [OUT=<folder>] bash run.sh
cd "$(dirname "$0")/../../.." || exit 1
OUT="${OUT:-docs/data/zen5-2026-11-28b}" exec bash docs/data/zen5-2026-11-27/run.sh
