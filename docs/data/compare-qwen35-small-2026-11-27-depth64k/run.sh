#!/bin/bash
cd "$(dirname "$0")/../../.."  # the repository (written as /tmp/run-64k.sh, run from /work/main)
QARGS="--vocab_size 33799 --hidden_size 512 --intermediate_size 1536 --num_hidden_layers 8 \
--full_attention_interval 4 --num_attention_heads 4 --num_key_value_heads 2 --head_dim 128 \
--linear_num_key_heads 4 --linear_num_value_heads 4 --linear_key_head_dim 128 \
--linear_value_head_dim 128 --tie_word_embeddings --max_position_embeddings 131072 \
--dtype bfloat16 --seed 1"
SAME_CHECKPOINT=1 SAME_WRITER=hf_qwen35.py SAME_HF_ARGS="$QARGS" CKPT_DIR=/tmp/fs-qwen35-small \
  CKPT_NAME=qwen35-small TYPES="f32" REFERENCE=0 DEPTHS="16384 65536" REPS=1 \
  bash bench/compare_llamacpp.sh /work/llamacpp/llama.cpp/build "${OUT:-/tmp/cmp-q35-64k}"
