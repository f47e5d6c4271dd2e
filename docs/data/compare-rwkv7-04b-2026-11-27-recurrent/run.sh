#!/bin/bash
# RWKV-7 0.4B vs llama.cpp after the CPU prefill moved to the recurrent form (kernels/rwkv7.h).
cd "$(dirname "$0")/../../.."  # the repository
SAME_CHECKPOINT=1 SAME_WRITER=hf_rwkv7.py SAME_HF_ARGS="--vocab_size 65536 --hidden_size 1024 \
--head_dim 64 --num_hidden_layers 24 --intermediate_size 4096 --decay_low_rank_dim 64 \
--a_low_rank_dim 64 --v_low_rank_dim 32 --gate_low_rank_dim 128 --dtype bfloat16 --seed 1" \
  CKPT_DIR=/tmp/fs-rwkv7-04b CKPT_NAME=rwkv7-0.4b DEPTHS="" REPS=2 PP4096_THREADS=2 \
  TYPES="f32 bf16 int8" REFERENCE=0 bash bench/compare_llamacpp.sh /work/llamacpp/llama.cpp/build \
  docs/data/compare-rwkv7-04b-2026-11-27-recurrent
