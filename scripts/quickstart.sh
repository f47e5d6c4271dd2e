#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install every package, build, and start the
# flatstate server with every shipped model in models/ (Ctrl-C stops it).
# Extra arguments go to flatstate-server (e.g. --port 50052 --metrics_port 0).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [[ -x build/server/flatstate-server ]]; then
  mkdir -p checkpoints
  echo "quickstart: serving models/ on localhost:50051 (try: build/clients/cli/flatstate-cli generate --prompt 'ROMEO:')"
  exec build/server/flatstate-server --models_dir models --checkpoint_dir checkpoints "$@"
fi
# No server in this build: stream a CLI generation from a shipped model instead.
exec build/clients/cli/flatstate-cli generate --local_model models/shakespeare-linear-elu \
  --prompt "ROMEO:" --max_new_tokens 300 "$@"
