#!/bin/bash
# Issue 30's targets on a 2-vCPU AMD EPYC of CPU family 26 (Zen 5: AVX-512 with 512-bit
# datapaths, VNNI, BF16; `machine.txt`): batch 32 against batch 1 (flatstate alone), then RWKV-7
# 0.1B and Mamba-2 130M against llama.cpp de3ff81 (GGML_NATIVE) on the same random-weight
# checkpoints as compare-rwkv7-01b-2026-11-27-amd and compare-mamba2-130m-2026-11-27-amd (same
# writer arguments), the output head at each row's weight type on both sides
# (FLATSTATE_BENCH_HEAD_DTYPE=same: llama.cpp's BF16 and Q8_0 files hold the head at that type).
set -u
cd "$(dirname "$0")/../../.."  # the repository
out=${OUT:-docs/data/zen5-2026-11-27}  # OUT: another folder (zen5-2026-11-28b/run.sh)
BENCH=${FLATSTATE_BENCH:-build/bench/flatstate-bench}
LLAMA_BUILD=${LLAMA_BUILD:-/work/llamacpp/llama.cpp/build}
{ date -u; git rev-parse --short HEAD; lscpu | grep -E "Model name|CPU family|^Model:|^CPU\(s\)|L2|L3|Flags" | cut -c1-400; uptime; } > "$out/machine.txt"
if [[ "${PART:-all}" == all || "${PART}" == batch ]]; then
  # Batch 32 against batch 1, 2 threads, sampling at 0.8 (the bench's default), twice.
  for round in 1 2; do
    echo "== batch round $round $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
    FLATSTATE_BENCH_MODELS=/tmp/fs-rwkv7-01b/rwkv7-0.1b,/tmp/fs-mamba2-130m/mamba2-130m "$BENCH" \
      --benchmark_filter='^Decode/(rwkv7-0.1b|mamba2-130m)/(f32|bf16|int8)/threads:2/batch:(1|32)/' \
      2>&1 | grep -E "^Decode|gemm_isa"
  done > "$out/batch32.txt"
fi
RWKV="--vocab_size 65536 --hidden_size 768 \
--head_dim 64 --num_hidden_layers 12 --intermediate_size 3072 --decay_low_rank_dim 64 \
--a_low_rank_dim 64 --v_low_rank_dim 32 --gate_low_rank_dim 128 --dtype bfloat16 --seed 1"
MAMBA="--tokenizer tests/data/hf_llama_tiny \
--vocab_size 50288 --hidden_size 768 --num_hidden_layers 24 --expand 2 --head_dim 64 \
--state_size 128 --n_groups 1 --conv_kernel 4 --tie_word_embeddings --dtype bfloat16 --seed 1"
export FLATSTATE_BENCH_HEAD_DTYPE=same
if [[ "${PART:-all}" == all || "${PART}" == rwkv ]]; then
  SAME_CHECKPOINT=1 SAME_WRITER=hf_rwkv7.py SAME_HF_ARGS="$RWKV" CKPT_DIR=/tmp/fs-rwkv7-01b \
    CKPT_NAME=rwkv7-0.1b DEPTHS="" REPS=${REPS:-1} TYPES="${TYPES:-f32 bf16 int8}" REFERENCE=0 \
    bash bench/compare_llamacpp.sh "$LLAMA_BUILD" "$out/rwkv7-0.1b"
fi
if [[ "${PART:-all}" == all || "${PART}" == mamba ]]; then
  SAME_CHECKPOINT=1 SAME_WRITER=hf_mamba2.py SAME_HF_ARGS="$MAMBA" CKPT_DIR=/tmp/fs-mamba2-130m \
    CKPT_NAME=mamba2-130m DEPTHS="" REPS=${REPS:-1} TYPES="${TYPES:-f32 bf16 int8}" REFERENCE=0 \
    bash bench/compare_llamacpp.sh "$LLAMA_BUILD" "$out/mamba2-130m"
fi
RWKV04="--vocab_size 65536 --hidden_size 1024 \
--head_dim 64 --num_hidden_layers 24 --intermediate_size 4096 --decay_low_rank_dim 64 \
--a_low_rank_dim 64 --v_low_rank_dim 32 --gate_low_rank_dim 128 --dtype bfloat16 --seed 1"
if [[ "${PART:-all}" == all || "${PART}" == rwkv04 ]]; then
  # The 0.4B shape (compare-rwkv7-04b-2026-11-27-recurrent's checkpoint), with 4096-token prefill.
  SAME_CHECKPOINT=1 SAME_WRITER=hf_rwkv7.py SAME_HF_ARGS="$RWKV04" CKPT_DIR=/tmp/fs-rwkv7-04b \
    CKPT_NAME=rwkv7-0.4b DEPTHS="" REPS=${REPS:-1} PP4096_THREADS=2 \
    TYPES="${TYPES:-f32 bf16 int8}" REFERENCE=0 \
    bash bench/compare_llamacpp.sh "$LLAMA_BUILD" "$out/rwkv7-0.4b"
fi
