#!/usr/bin/env bash
# The chunked CUDA prefill of the gated linear recurrence (kernels/cuda/gated_linear.cu) and of
# RWKV-7 (kernels/cuda/rwkv7_chunk.cu) against their token-by-token forms and against the
# upstream implementations, on random-weight folders in the upstream layouts written on the GPU
# machine: fla-hub gla-340M's shape (tools/hf_gla.py: 24 layers, d 1024, 4 heads, key 128 / value
# 256 per head), mamba2-130m's (tools/hf_mamba2.py: 24 layers, d 768, 24 heads of 64, state 128)
# and rwkv7-191M-world's (tools/hf_rwkv7.py: 12 layers, d 768, heads of 64). Per folder, prefill
# of one 4096-token prompt:
#   chunked.json       flatstate-bench Prefill/<name>/chunked/len:4096 on CUDA, bf16 weights
#   recurrent.json     the same rows with FLATSTATE_CUDA_LINEAR_PREFILL=recurrent and
#                      FLATSTATE_CUDA_RWKV7_PREFILL=recurrent
#   torch-<name>.json  transformers, bf16, with fla's models and Triton kernels for GLA and
#                      RWKV-7 (not in transformers), transformers' own Mamba2ForCausalLM
#                      (tools/torch_hf_decode_bench.py --batches '' --prefill 4096)
# FAMILIES [gla-340m mamba2-130m rwkv7-0.1b] picks folders; TORCH [1]: 0 skips transformers
# (fla's Triton autotuning took over 170 s for GLA alone on an H200, 2026-11-27).
# Run by scripts/gpu_run.sh's step famprefill, which sets LD_LIBRARY_PATH for the bundle:
#   BIN=<bundle>/bin WORK=<scratch dir> [PYTHON, UPSTREAM_FLA] scripts/gpu_family_prefill.sh OUT
# Exit status: 0 if every writer and run succeeded.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# == 1 && -n "${BIN:-}" && -n "${WORK:-}" ]] || {
  echo "usage: BIN=DIR WORK=DIR scripts/gpu_family_prefill.sh OUT_DIR" >&2; exit 2; }
out="$1"
py="${PYTHON:-python3}"
fla="${UPSTREAM_FLA:-.upstream/fla.tar.gz}"
mkdir -p "$out" "$WORK"
rc=0
write() {  # name tool args...
  local name=$1 tool=$2; shift 2
  echo "writing $name ($tool $*)"
  "$py" "tools/$tool" --out "$WORK/$name" --dtype bfloat16 --seed 1 "$@" \
    > "$out/write-$name.log" 2>&1 ||
    { echo "writer $name failed: $(tail -1 "$out/write-$name.log")"; rc=1; }
}
families="${FAMILIES:-gla-340m mamba2-130m rwkv7-0.1b}"
models=""
for m in $families; do
  case $m in
    gla-340m)
      write gla-340m hf_gla.py --tokenizer none --vocab_size 32000 --hidden_size 1024 \
        --num_hidden_layers 24 --num_heads 4 --expand_k 0.5 --expand_v 1 ;;
    mamba2-130m)
      write mamba2-130m hf_mamba2.py --tokenizer none --vocab_size 50288 --hidden_size 768 \
        --num_hidden_layers 24 --expand 2 --head_dim 64 --state_size 128 --n_groups 1 \
        --tie_word_embeddings ;;
    rwkv7-0.1b)
      write rwkv7-0.1b hf_rwkv7.py --no_vocab --vocab_size 65536 --hidden_size 768 --head_dim 64 \
        --num_hidden_layers 12 --intermediate_size 3072 --decay_low_rank_dim 64 \
        --a_low_rank_dim 64 --v_low_rank_dim 32 --gate_low_rank_dim 128 ;;
    *) echo "unknown family $m" >&2; exit 2 ;;
  esac
  models="${models:+$models,}$WORK/$m"
done
filter="^Prefill/($(echo $families | tr ' ' '|'))/chunked/"
for form in chunked recurrent; do
  extra=()
  [[ $form == recurrent ]] &&
    extra=(FLATSTATE_CUDA_LINEAR_PREFILL=recurrent FLATSTATE_CUDA_RWKV7_PREFILL=recurrent)
  echo "flatstate-bench $filter ($form)"
  env "${extra[@]}" FLATSTATE_BENCH_DEVICE=cuda FLATSTATE_BENCH_WEIGHT_DTYPE=bf16 \
    FLATSTATE_BENCH_MODELS="$models" FLATSTATE_BENCH_DIR="$WORK/bench-models" \
    "$BIN/flatstate-bench" --benchmark_filter="$filter" --benchmark_out="$out/$form.json" \
    --benchmark_out_format=json || rc=1
done
[[ "${TORCH:-1}" == 1 ]] && for m in $families; do
  echo "transformers on $m"
  fla_arg=(--fla "$fla")
  [[ $m == mamba2-* ]] && fla_arg=()
  PYTHONUNBUFFERED=1 "$py" tools/torch_hf_decode_bench.py --model "$WORK/$m" "${fla_arg[@]}" \
    --batches '' --prefill 4096 --out "$out/torch-$m.json" || rc=1
done
exit $rc
