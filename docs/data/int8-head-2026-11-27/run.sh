#!/bin/bash
# int8 decode with the output head at int8 (FLATSTATE_BENCH_HEAD_DTYPE=same: as llama.cpp's Q8_0
# files hold it) against the default head (bf16, the files' own) and llama.cpp Q8_0, batch 1,
# greedy, 1 and 2 threads, two interleaved rounds. The checkpoints and GGUFs of the
# compare-qwen35-08b-248k-2026-11-27 and compare-rwkv7-0{1,4}b-2026-11-27-recurrent runs.
set -u
out=$(dirname "$0")
BENCH=${FLATSTATE_BENCH:-build/bench/flatstate-bench}
LLAMA=/work/llamacpp/llama.cpp/build/bin/llama-bench
{ date -u; git rev-parse --short HEAD; lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200; uptime; } > "$out/machine.txt"
models="/tmp/fs-qwen35-08b-248k/qwen35-08b-248k /tmp/fs-rwkv7-01b/rwkv7-0.1b /tmp/fs-rwkv7-04b/rwkv7-0.4b"
for round in 1 2; do
  for m in $models; do
    name=$(basename "$m")
    echo "== round $round $name llama.cpp Q8_0 $(date -u +%H:%M:%S)"
    "$LLAMA" -m "$(dirname "$m")/model-Q8_0.gguf" -r 1 -t 1,2 -p 0 -n 64 2>/dev/null | grep -E "tg64"
    for head in default same; do
      echo "== round $round $name flatstate int8 head=$head $(date -u +%H:%M:%S)"
      if [[ $head == same ]]; then export FLATSTATE_BENCH_HEAD_DTYPE=same; else unset FLATSTATE_BENCH_HEAD_DTYPE; fi
      FLATSTATE_BENCH_COMPARE_MODELS=$m FLATSTATE_BENCH_COMPARE_DEPTHS= "$BENCH" \
        --benchmark_filter="^Decode/$name/int8/threads:(1|2)/" 2>&1 | grep Decode
    done
    unset FLATSTATE_BENCH_HEAD_DTYPE
  done
done
