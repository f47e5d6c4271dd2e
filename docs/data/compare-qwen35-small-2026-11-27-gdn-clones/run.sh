#!/bin/bash
# The small Qwen3.5-layout hybrid vs llama.cpp after the gated delta rule's CPU body became target
# clones (kernels/cpu/gated_delta.cc): compare_llamacpp.sh with flatstate's K/V cache f32, then
# flatstate's rows again with a bf16 K/V cache (the bytes of llama.cpp's f16 cache).
cd "$(dirname "$0")/../../.."  # the repository
D=docs/data/compare-qwen35-small-2026-11-27-gdn-clones
QARGS="--vocab_size 33799 --hidden_size 512 --intermediate_size 1536 --num_hidden_layers 8 \
--full_attention_interval 4 --num_attention_heads 4 --num_key_value_heads 2 --head_dim 128 \
--linear_num_key_heads 4 --linear_num_value_heads 4 --linear_key_head_dim 128 \
--linear_value_head_dim 128 --tie_word_embeddings --max_position_embeddings 131072 \
--dtype bfloat16 --seed 1"
SAME_CHECKPOINT=1 SAME_WRITER=hf_qwen35.py SAME_HF_ARGS="$QARGS" CKPT_DIR=/tmp/fs-qwen35-small \
  CKPT_NAME=qwen35-small TYPES="f32" REFERENCE=0 DEPTHS="16384 65536" REPS=2 \
  bash bench/compare_llamacpp.sh /work/llamacpp/llama.cpp/build "$D"
FLATSTATE_BENCH_KV_DTYPE=bf16 FLATSTATE_BENCH_COMPARE_MODELS=/tmp/fs-qwen35-small/qwen35-small \
  FLATSTATE_BENCH_COMPARE_DEPTHS=16384,65536 build/bench/flatstate-bench --benchmark_repetitions=2 \
  --benchmark_filter='^(Decode/qwen35-small/f32/threads:[12]/batch:1/|DecodeAtContext/qwen35-small/f32/threads:2/ctx:(0|16384|65536)/)' \
  2>&1 | tee "$D/flatstate-kv-bf16.txt"
