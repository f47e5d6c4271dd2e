#!/bin/bash
# The Qwen3.5-0.8B shape of compare-qwen35-2026-11-26 (vocabulary 33,799) on the AVX2-only AMD
# EPYC, one repetition, the binary of 435e345's code (copied to /tmp/fsb-q35 so that builds
# during the run could not change it; machine.txt names 5c2d1da because the change was staged,
# not yet committed, and the script's dirty check reads unstaged changes only). From the
# repository root.
QARGS="--vocab_size 33799 --hidden_size 1024 --intermediate_size 3584 --num_hidden_layers 24 \
--num_attention_heads 8 --num_key_value_heads 2 --head_dim 256 --linear_num_key_heads 16 \
--linear_num_value_heads 16 --linear_key_head_dim 128 --linear_value_head_dim 128 \
--tie_word_embeddings --max_position_embeddings 32768 --dtype bfloat16 --seed 1"
FLATSTATE_BENCH=/tmp/fsb-q35 SAME_CHECKPOINT=1 SAME_WRITER=hf_qwen35.py SAME_HF_ARGS="$QARGS" \
  CKPT_DIR=/tmp/fs-qwen35-08b CKPT_NAME=qwen35-08b TYPES="f32 bf16 int8" REFERENCE=0 DEPTHS="" \
  PP4096_THREADS=2 REPS=1 bash bench/compare_llamacpp.sh /work/llamacpp/llama.cpp/build \
  /tmp/cmp-q35-08b-amd
