#!/bin/bash
# Qwen3.5-0.8B's shape with its real vocabulary size (248,320, tied embeddings) against
# llama.cpp on the same checkpoint, AVX2-only CPU. The tokenizer is the tiny-Shakespeare
# SentencePiece model of compare-qwen35-2026-11-26 padded to 248,320 pieces (pad_vocab.py).
# Usage (from the repository root): bash docs/data/compare-qwen35-08b-248k-2026-11-27/run.sh
set -euo pipefail
here=docs/data/compare-qwen35-08b-248k-2026-11-27
/usr/bin/python3 "$here/pad_vocab.py" /tmp/fs-qwen35-08b/qwen35-08b/tokenizer.model 248320 \
  /tmp/q35-248k-tok
QARGS="--tokenizer /tmp/q35-248k-tok --vocab_size 248320 --hidden_size 1024 \
--intermediate_size 3584 --num_hidden_layers 24 --num_attention_heads 8 --num_key_value_heads 2 \
--head_dim 256 --linear_num_key_heads 16 --linear_num_value_heads 16 --linear_key_head_dim 128 \
--linear_value_head_dim 128 --tie_word_embeddings --max_position_embeddings 32768 \
--dtype bfloat16 --seed 1"
FLATSTATE_BENCH=${FLATSTATE_BENCH:-build/bench/flatstate-bench} SAME_CHECKPOINT=1 \
  SAME_WRITER=hf_qwen35.py SAME_HF_ARGS="$QARGS" CKPT_DIR=/tmp/fs-qwen35-08b-248k \
  CKPT_NAME=qwen35-08b-248k TYPES="f32 bf16 int8" REFERENCE=0 DEPTHS="" PP4096_THREADS=2 \
  REPS=${REPS:-1} bash bench/compare_llamacpp.sh /work/llamacpp/llama.cpp/build /tmp/cmp-q35-248k
cp /tmp/cmp-q35-248k/*.json /tmp/cmp-q35-248k/*.txt /tmp/cmp-q35-248k/table.md \
  /tmp/cmp-q35-248k/run.log "$here/"
