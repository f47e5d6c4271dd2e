#!/usr/bin/env bash
# Side-by-side decode speed at batch 1, flatstate vs the PyTorch reference (tools/), on identical
# weights, same prompt, greedy, one thread each, measured in one run. Also checks that both
# produce the same greedy tokens.
#   bash bench/compare_reference.sh [models/shakespeare-linear-elu ...]
set -euo pipefail
cd "$(dirname "$0")/.."
CLI=build/clients/cli/flatstate-cli
TOKENS="${TOKENS:-500}"
PROMPT="${PROMPT:-ROMEO:}"
models=("$@")
[[ ${#models[@]} -eq 0 ]] && models=(models/shakespeare-*)
printf "%-28s %14s %14s %8s %s\n" model "pytorch tok/s" "flatstate tok/s" ratio same_tokens
for m in "${models[@]}"; do
  ref=$(/usr/bin/python3 tools/bench_reference.py --model "$m" --prompt "$PROMPT" --tokens "$TOKENS" --threads 1)
  ref_tps=$(echo "$ref" | /usr/bin/python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["decode_tokens_per_s"])')
  ref_text=$(echo "$ref" | /usr/bin/python3 -c 'import json,sys; print(bytes(json.load(sys.stdin)["tokens"]).decode("utf-8","replace"))')
  out=$("$CLI" generate --local_model "$m" --prompt "$PROMPT" --max_new_tokens "$TOKENS" \
        --temperature 0 --threads 1 2>/tmp/fs_compare.err)
  fs_tps=$(grep -o 'decode [0-9.]* tokens/s' /tmp/fs_compare.err | awk '{print $2}')
  same=no; [[ "${out#"$PROMPT"}" == "$ref_text" ]] && same=yes
  ratio=$(/usr/bin/python3 -c "print('%.1fx' % ($fs_tps / $ref_tps))")
  printf "%-28s %14s %14.1f %8s %s\n" "$(basename "$m")" "$ref_tps" "$fs_tps" "$ratio" "$same"
done
