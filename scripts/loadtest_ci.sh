#!/usr/bin/env bash
# Short load test for CI (docs/loadtest.md): starts a flatstate-server on a free loopback port
# with five small random-weight models (linear_elu, gated, window, hybrid, and softmax with a
# 512-block KV pool so the pool fills at 8k tokens) and four Hugging Face ones (Mamba-2, RWKV-7, a
# Qwen3.5 hybrid and its all-attention twin: the hybrid's K/V per token must be 1/4 of the
# twin's), runs
# flatstate-loadtest's memory sweep (1k..64k tokens; the models with K/V until RESOURCE_EXHAUSTED), a short concurrency sweep (1, 4, 16) and a
# short multi-turn chat run (3 stateless conversations of 4 turns per model: the prefix cache
# keeps prefill per turn flat), and fails if any check fails.
# The server is killed on exit. About a minute on 2 cores.
#
#   [LOADTEST_PART=all|main|1m] bash scripts/loadtest_ci.sh [SERVER_BIN] [LOADTEST_BIN] [WORK_DIR]
#
# LOADTEST_RSS_SLACK_MIB [4]: the memory sweeps' allowed RSS change floor.
# LOADTEST_PART: main = the sweeps above; 1m = only growing one Mamba-2 and one RWKV-7 session to
# 1,048,576 tokens (state and checkpoint bytes equal at 1k and 1M, RSS flat); all (default) = both.
# ctest runs them as two tests, loadtest_ci and loadtest_1m (label soak), in the Release stage
# only (tests/clients is not built for the sanitizer stage).
#
# Defaults: build/server/flatstate-server, build/clients/loadtest/flatstate-loadtest, a fresh
# temporary folder (CSV files and plots land in WORK_DIR/out).
set -euo pipefail
FS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
SERVER=${1:-$FS_ROOT/build/server/flatstate-server}
LOADTEST=${2:-$FS_ROOT/build/clients/loadtest/flatstate-loadtest}
FS_WORK=${3:-$(mktemp -d /tmp/flatstate-loadtest-ci.XXXXXX)}
mkdir -p "$FS_WORK"
FS_WORK=$(cd "$FS_WORK" && pwd)
# shellcheck source=tests/clients/live_server.sh
source "$FS_ROOT/tests/clients/live_server.sh"
trap fs_stop_server EXIT

for bin in "$SERVER" "$LOADTEST"; do
  [[ -x "$bin" ]] || { echo "error: $bin is not built" >&2; exit 2; }
done
PART=${LOADTEST_PART:-all}
# The memory sweeps' RSS slack (flatstate-loadtest --rss_slack_mib): 4 MiB (under ASan, whose
# quarantine keeps freed blocks, ~4 MiB of growth per model: pass 16).
RSS_SLACK_MIB=${LOADTEST_RSS_SLACK_MIB:-4}
case "$PART" in all|main|1m) ;; *) echo "error: LOADTEST_PART=$PART (all, main or 1m)" >&2; exit 2 ;; esac
mkdir -p "$FS_WORK/models"
cp -r "$FS_ROOT/tests/data/hf_mamba2_tiny" "$FS_WORK/models/ci-mamba2"
cp -r "$FS_ROOT/tests/data/hf_rwkv7_tiny" "$FS_WORK/models/ci-rwkv7"
if [[ "$PART" != 1m ]]; then
SIZE=(--hidden_size 64 --layers 2 --heads 2)
fs_make_model ci-linear-elu linear_elu "${SIZE[@]}"
fs_make_model ci-softmax softmax "${SIZE[@]}"
fs_make_model ci-gated gated "${SIZE[@]}"
fs_make_model ci-window window "${SIZE[@]}"
fs_make_model ci-hybrid hybrid "${SIZE[@]}"
# Hugging Face families: a Qwen3.5 hybrid (Gated DeltaNet x 3 + full attention x 1) beside its
# all-attention twin (the same writer and shape, every layer full attention), and Mamba-2.
QWEN35=(--family qwen3_5 --tokenizer "$FS_ROOT/tests/data/hf_llama_tiny" --hidden_size 32
  --intermediate_size 48 --num_hidden_layers 4 --num_attention_heads 2 --num_key_value_heads 1
  --head_dim 32 --linear_num_key_heads 2 --linear_num_value_heads 4 --linear_key_head_dim 16
  --linear_value_head_dim 16 --tie_word_embeddings --dtype bfloat16 --seed 6
  --max_position_embeddings 131072 --force)
nice /usr/bin/python3 "$FS_ROOT/tools/hf_qwen35.py" --out "$FS_WORK/models/ci-qwen35-hybrid" \
  "${QWEN35[@]}" >/dev/null
nice /usr/bin/python3 "$FS_ROOT/tools/hf_qwen35.py" --out "$FS_WORK/models/ci-qwen35-attention" \
  "${QWEN35[@]}" --full_attention_interval 1 >/dev/null
fi
TOKEN=loadtest-ci-token  # exercises --auth_token end to end
fs_start_server "$SERVER" --kv_blocks 512 --max_sessions 128 --threads 2 --auth_token "$TOKEN"

ADDR=127.0.0.1:$FS_PORT
COMMON=(--server "$ADDR" --auth_token "$TOKEN" --deadline 120s --wait_for_server 30s
  --progress=false)
if [[ "$PART" != 1m ]]; then
echo "== memory sweep"
timeout 150 nice "$LOADTEST" "${COMMON[@]}" --mode memory --rss_slack_mib "$RSS_SLACK_MIB" \
  --models ci-linear-elu,ci-gated,ci-window,ci-hybrid,ci-softmax,ci-mamba2,ci-rwkv7,ci-qwen35-hybrid,ci-qwen35-attention \
  --contexts 1k,4k,16k,64k --chunk_tokens 4096 --decode_tokens 32 --csv_dir "$FS_WORK/out"
echo "== concurrency sweep"
timeout 90 nice "$LOADTEST" "${COMMON[@]}" --mode concurrency --models ci-linear-elu \
  --concurrency 1,4,16 --requests_per_session 2 --prompt_tokens 32 --new_tokens 32 \
  --csv_dir "$FS_WORK/out"
echo "== multi-turn chat (prefix cache)"
timeout 120 nice "$LOADTEST" "${COMMON[@]}" --mode multiturn --models ci-linear-elu,ci-softmax \
  --conversations 3 --turns 4 --message_tokens 100 --reply_tokens 16 --csv_dir "$FS_WORK/out" |
  tee "$FS_WORK/multiturn.txt"
grep -q "PASS multiturn server ci-linear-elu: prefix cache keeps prefill per turn flat" \
  "$FS_WORK/multiturn.txt" || { echo "error: no cached prompt tokens reported" >&2; exit 1; }
fi
if [[ "$PART" != main ]]; then
echo "== memory to 1M tokens (the pure recurrent Hugging Face families)"
timeout 240 nice "$LOADTEST" "${COMMON[@]}" --mode memory --rss_slack_mib "$RSS_SLACK_MIB" \
  --models ci-mamba2,ci-rwkv7 \
  --contexts 1k,1m --chunk_tokens 65536 --decode_tokens 32 --csv_dir "$FS_WORK/out/1m"
fi
kill -0 "$FS_SERVER_PID" || { echo "error: the server died" >&2; exit 1; }
echo "loadtest_ci: PASS (results in $FS_WORK/out)"
