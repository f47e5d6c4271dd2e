#!/bin/bash
# Mamba-2 130M vs llama.cpp on the AVX2 EPYC after the GEMM split and SmallMatMul's 8-float tiles.
cd "$(dirname "$0")/../../.."  # the repository
SAME_CHECKPOINT=1 SAME_WRITER=hf_mamba2.py SAME_HF_ARGS="--tokenizer tests/data/hf_llama_tiny \
--vocab_size 50288 --hidden_size 768 --num_hidden_layers 24 --expand 2 --head_dim 64 \
--state_size 128 --n_groups 1 --conv_kernel 4 --tie_word_embeddings --dtype bfloat16 --seed 1" \
  CKPT_DIR=/tmp/fs-mamba2-130m CKPT_NAME=mamba2-130m DEPTHS="" REPS=2 PP4096_THREADS=2 \
  TYPES="f32 bf16 int8" REFERENCE=0 bash bench/compare_llamacpp.sh /work/llamacpp/llama.cpp/build \
  docs/data/compare-mamba2-130m-2026-11-27-amd
