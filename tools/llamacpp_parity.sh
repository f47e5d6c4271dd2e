#!/usr/bin/env bash
# Check the float64 reference (tools/flatstate_ref/llama.py, qwen35.py, mamba2.py or rwkv7.py)
# against llama.cpp on a tiny random Hugging Face LlamaForCausalLM, Qwen2ForCausalLM,
# Qwen3ForCausalLM, Qwen3_5ForCausalLM, Qwen3NextForCausalLM, Mamba2ForCausalLM or
# RWKV7ForCausalLM folder, and write golden vectors.
#
#   FAMILY=qwen2|qwen3|qwen35|qwen3next|mamba2|rwkv7 bash tools/llamacpp_parity.sh LLAMA_CPP_DIR OUT_DIR
#
# writes the default tiny model of that family (tests/data/hf_qwen2_tiny, hf_qwen3_tiny,
# hf_qwen35_tiny, hf_mamba2_tiny: their README.md), with the SentencePiece tokenizer copied from
# tests/data/hf_llama_tiny; FAMILY unset or llama is the Llama default below. HF_ARGS overrides
# the writer flags altogether.
#
# (FAMILY=rwkv7: an fla-hub RWKV7ForCausalLM folder from tools/hf_rwkv7.py, tests/data/
# hf_rwkv7_tiny; llama.cpp's Rwkv7Model reads its rwkv_vocab_v20230424.txt, no shim needed
# beyond the transformers stand-in and the float8 placeholders. Its head_dim is 32, and
# llama.cpp's CPU wkv7 kernel steps over a head GGML_F32_STEP floats at a time (64 with
# AVX-512: it then reads and writes past a 32-wide head), so run it with LLAMA_BUILD naming an
# AVX2 build (GGML_F32_STEP 32), e.g. LLAMA_BUILD=build-avx2. norm_eps 2e-5 makes fla's g_norm
# eps head_dim * norm_eps = 64e-5, the constant llama.cpp and BlinkDL use.)
#
#   bash tools/llamacpp_parity.sh LLAMA_CPP_DIR OUT_DIR
#
# LLAMA_CPP_DIR is a llama.cpp source tree with libllama built in LLAMA_CPP_DIR/build/bin (how to
# get and build one offline: tests/data/hf_llama_tiny/README.md). Steps:
#   1. tools/hf_llama.py (hf_qwen35.py, hf_mamba2.py for those families) writes OUT_DIR/hf
#      (flags from HF_ARGS; default: the tiny model of
#      tests/data/hf_llama_tiny, whose tokenizer it trains with python3-sentencepiece). With
#      MODEL_DIR=<folder> that folder is used instead and nothing is written.
#   2. llama.cpp's own convert_hf_to_gguf.py --outtype f32 makes OUT_DIR/model-f32.gguf, run by
#      Debian's /usr/bin/python3 with PYTHONPATH=OUT_DIR/shim:LLAMA_CPP_DIR/gguf-py. It needs
#      torch, numpy, yaml, sentencepiece and tqdm (python3-torch, -numpy, -yaml, -sentencepiece,
#      -tqdm) and imports `transformers` at module level for AutoConfig, which Debian does not
#      package: OUT_DIR/shim/transformers is a stand-in whose from_pretrained raises, and the
#      converter then reads config.json itself (its own fallback in ModelBase.load_hparams).
#      With tokenizer.model present the vocabulary comes from sentencepiece, not AutoTokenizer
#      (LlamaModel.set_vocab and Qwen2Model.set_vocab, which Qwen3Model inherits, both try
#      tokenizer.model first; Qwen's own byte-level BPE path would call AutoTokenizer;
#      Mamba2Model.set_vocab reads config.json itself and also tries tokenizer.model first).
#      Debian's torch 1.13 lacks torch.float8_e4m3fn / float8_e5m2, which the converter names
#      in two dtype tables at import: OUT_DIR/shim/run_convert.py sets them to placeholder
#      strings (no tensor here has those types) and runs the unmodified converter with runpy.
#   3. g++ builds tools/llamacpp/logits.cc against LLAMA_CPP_DIR/build/bin/libllama.so.
#   4. logits runs the seeded prompt (tools/hf_llama_golden.py prompt: BOS + 47 ids, seed 1234)
#      and 64 greedy tokens: OUT_DIR/llamacpp_logits.json (every prompt position, full vocab).
#   5. tools/hf_llama_golden.py compare runs the reference on the same prompt and writes
#      OUT_DIR/golden_reference.json and OUT_DIR/golden_llamacpp.json, printing the max abs
#      logit difference, the logit range, greedy agreement and the smallest top-1/top-2 margin.
# Environment: FAMILY, HF_ARGS, MODEL_DIR, THREADS (1), N_PROMPT (48; 80 for qwen35, qwen3next,
# mamba2 and rwkv7), N_GREEDY (64), SEED (1234), PY, LLAMA_BUILD (build: the libllama in
# LLAMA_CPP_DIR/$LLAMA_BUILD/bin).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 LLAMA_CPP_DIR OUT_DIR" >&2
  exit 2
fi
LLAMA=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-/usr/bin/python3}
THREADS=${THREADS:-1}
N_PROMPT_SET=${N_PROMPT:-}
N_PROMPT=${N_PROMPT:-48}
N_GREEDY=${N_GREEDY:-64}
SEED=${SEED:-1234}
# tests/data/hf_llama_tiny's flags (its README.md); the tokenizer is trained
DEFAULT_HF_ARGS="--vocab_size 512 --hidden_size 96 --intermediate_size 256 --num_hidden_layers 3"
DEFAULT_HF_ARGS+=" --num_attention_heads 4 --num_key_value_heads 2 --head_dim 32"
DEFAULT_HF_ARGS+=" --dtype bfloat16 --shards 2 --seed 1"
FAMILY=${FAMILY:-llama}
WRITER=hf_llama.py
CONVERT_FLAGS=()
case "$FAMILY" in
  llama) ;;
  qwen35|qwen3next)  # tests/data/hf_qwen35_tiny's flags (its README.md); qwen3next: the same
    # shapes as Qwen3NextForCausalLM with num_experts 0 (in_proj_qkvz / in_proj_ba)
    WRITER=hf_qwen35.py
    CONVERT_FLAGS=(--no-mtp)
    [ "$FAMILY" = qwen35 ] && fam=qwen3_5 || fam=qwen3_next
    DEFAULT_HF_ARGS="--family $fam --tokenizer $REPO/tests/data/hf_llama_tiny"
    DEFAULT_HF_ARGS+=" --hidden_size 32 --intermediate_size 48 --num_hidden_layers 4"
    DEFAULT_HF_ARGS+=" --num_attention_heads 2 --num_key_value_heads 1 --head_dim 32"
    DEFAULT_HF_ARGS+=" --linear_num_key_heads 2 --linear_num_value_heads 4"
    DEFAULT_HF_ARGS+=" --linear_key_head_dim 16 --linear_value_head_dim 16"
    DEFAULT_HF_ARGS+=" --tie_word_embeddings --dtype bfloat16 --seed 6 --init_gain 1.5"
    N_PROMPT=${N_PROMPT_SET:-80} ;;
  mamba2)  # tests/data/hf_mamba2_tiny's flags (its README.md); n_groups 1, where llama.cpp's
    # per-group gated norm equals transformers' whole-width one
    WRITER=hf_mamba2.py
    DEFAULT_HF_ARGS="--tokenizer $REPO/tests/data/hf_llama_tiny --hidden_size 48"
    DEFAULT_HF_ARGS+=" --num_hidden_layers 2 --expand 2 --head_dim 16 --state_size 16"
    DEFAULT_HF_ARGS+=" --n_groups 1 --conv_kernel 4 --chunk_size 32 --tie_word_embeddings"
    DEFAULT_HF_ARGS+=" --dtype bfloat16 --seed 0 --init_gain 3"
    N_PROMPT=${N_PROMPT_SET:-80} ;;
  qwen2)  # tests/data/hf_qwen2_tiny's flags (its README.md)
    DEFAULT_HF_ARGS="--family qwen2 --tokenizer $REPO/tests/data/hf_llama_tiny"
    DEFAULT_HF_ARGS+=" --hidden_size 64 --intermediate_size 192 --num_hidden_layers 2"
    DEFAULT_HF_ARGS+=" --num_attention_heads 4 --num_key_value_heads 2 --head_dim 0"
    DEFAULT_HF_ARGS+=" --rope_theta 1000000 --rms_norm_eps 1e-6 --tie_word_embeddings"
    DEFAULT_HF_ARGS+=" --dtype bfloat16 --shards 2 --seed 7 --init_gain 3" ;;
  qwen3)  # tests/data/hf_qwen3_tiny's flags (its README.md)
    DEFAULT_HF_ARGS="--family qwen3 --tokenizer $REPO/tests/data/hf_llama_tiny"
    DEFAULT_HF_ARGS+=" --hidden_size 96 --intermediate_size 256 --num_hidden_layers 3"
    DEFAULT_HF_ARGS+=" --num_attention_heads 6 --num_key_value_heads 2 --head_dim 24"
    DEFAULT_HF_ARGS+=" --rope_theta 1000000 --rms_norm_eps 1e-6"
    DEFAULT_HF_ARGS+=" --dtype bfloat16 --shards 2 --seed 20 --init_gain 1" ;;
  rwkv7)  # tests/data/hf_rwkv7_tiny's flags (its README.md): fla-hub RWKV7ForCausalLM with
    # the synthetic World vocabulary that tools/hf_rwkv7.py writes
    WRITER=hf_rwkv7.py
    DEFAULT_HF_ARGS="--vocab_size 512 --hidden_size 64 --head_dim 32 --num_hidden_layers 2"
    DEFAULT_HF_ARGS+=" --intermediate_size 128 --decay_low_rank_dim 16 --a_low_rank_dim 16"
    DEFAULT_HF_ARGS+=" --v_low_rank_dim 8 --gate_low_rank_dim 16 --norm_eps 2e-5"
    DEFAULT_HF_ARGS+=" --dtype bfloat16 --seed 3"
    N_PROMPT=${N_PROMPT_SET:-80} ;;
  *) echo "FAMILY $FAMILY: want llama, qwen2, qwen3, qwen35, qwen3next, mamba2 or rwkv7" >&2; exit 2 ;;
esac
HF_ARGS=${HF_ARGS:-$DEFAULT_HF_ARGS}

LIB="$LLAMA/${LLAMA_BUILD:-build}/bin"
if [ ! -f "$LIB/libllama.so" ]; then
  echo "$LIB/libllama.so not found: build llama.cpp first" >&2
  exit 1
fi

# 1. the model folder
if [ -n "${MODEL_DIR:-}" ]; then
  HF=$(cd "$MODEL_DIR" && pwd)
else
  HF="$OUT/hf"
  # shellcheck disable=SC2086
  "$PY" "$REPO/tools/$WRITER" --out "$HF" --force $HF_ARGS
fi

# 2. llama.cpp's converter, with the transformers stand-in
mkdir -p "$OUT/shim/transformers"
cat > "$OUT/shim/transformers/__init__.py" <<'EOF'
"""Stand-in for `transformers` (not packaged in Debian), written by tools/llamacpp_parity.sh.
convert_hf_to_gguf.py imports AutoConfig at module level; ModelBase.load_hparams catches what
AutoConfig.from_pretrained raises and reads config.json itself. AutoTokenizer is only reached
by vocabulary paths that a folder with tokenizer.model does not take."""


class _Absent:
    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        raise ImportError("transformers is not installed (flatstate's stand-in)")


AutoConfig = _Absent
AutoTokenizer = _Absent
EOF
cat > "$OUT/shim/run_convert.py" <<'EOF'
"""Runs convert_hf_to_gguf.py (argv[1]) under a torch without the float8 dtypes (Debian's
1.13), written by tools/llamacpp_parity.sh: the converter only names them as dict keys and in a
membership test, so a placeholder that no tensor's dtype equals stands in. Qwen3.5 / Qwen3-Next
(conversion/qwen.py Qwen2MoeModel and its subclasses) take the vocabulary from AutoTokenizer
(_set_vocab_gpt2): with a tokenizer.model in the folder they are pointed at the SentencePiece
path instead, as Qwen2Model.set_vocab does."""
import os
import runpy
import sys

import torch

for name in ("float8_e4m3fn", "float8_e5m2"):
    if not hasattr(torch, name):
        setattr(torch, name, f"torch.{name} (absent in torch {torch.__version__})")
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
try:
    from conversion import qwen as _qwen
    _qwen.Qwen2MoeModel.set_vocab = lambda self: self._set_vocab_sentencepiece()
except ImportError:  # an older llama.cpp without the conversion package
    pass
runpy.run_path(script, run_name="__main__")
EOF
GGUF="$OUT/model-f32.gguf"
PYTHONPATH="$OUT/shim:$LLAMA/gguf-py" "$PY" "$OUT/shim/run_convert.py" \
  "$LLAMA/convert_hf_to_gguf.py" "$HF" \
  --outtype f32 --outfile "$GGUF" "${CONVERT_FLAGS[@]}" > "$OUT/convert.log" 2>&1 || {
  tail -30 "$OUT/convert.log" >&2
  exit 1
}
echo "converted: $GGUF (config.json read by the converter's fallback" \
  "$(grep -c 'Failed to load model config' "$OUT/convert.log") times)"

# 3. the logits program
g++ -O2 -std=c++17 -Wall -Wextra "$REPO/tools/llamacpp/logits.cc" -I "$LLAMA/include" \
  -I "$LLAMA/ggml/include" -L "$LIB" -lllama -Wl,-rpath,"$LIB" \
  -o "$OUT/logits"

# 4. llama.cpp's logits and greedy tokens
PROMPT=$("$PY" "$REPO/tools/hf_llama_golden.py" prompt "$HF" --n "$N_PROMPT" --seed "$SEED")
"$OUT/logits" "$GGUF" "$PROMPT" "$N_GREEDY" "$OUT/llamacpp_logits.json" "$THREADS"

# 5. the reference beside it
COMMIT=$(git -C "$LLAMA" log -1 --format=%h 2>/dev/null || echo unknown)
SETTINGS="F32 GGUF, F32 K/V cache, flash attention off, $THREADS thread(s), CPU,"
SETTINGS+=" argmax without a sampler"
"$PY" "$REPO/tools/hf_llama_golden.py" compare "$HF" "$OUT/llamacpp_logits.json" "$OUT" \
  --llama_cpp_commit "$COMMIT" --n_greedy "$N_GREEDY" \
  --settings "$SETTINGS" \
  | tee "$OUT/summary.json"
