#!/usr/bin/env bash
# ctest wrapper (openai_client_tools): tool calls through the official `openai` npm client
# against the real flatstate-server binary. Writes the test's model folder (a random Qwen3 with
# the published Qwen3 chat template: openai_tools_fixture.mjs), starts the server on free
# loopback ports (tests/clients/live_server.sh) and runs openai_tools_test.mjs against it.
#   openai_tools_test.sh SERVER_BIN TEST_MJS WORK_DIR
# Exit 77 (skipped) without node, tests/oracles/node_modules (npm ci --prefix tests/oracles) or
# python3-jinja2, unless FLATSTATE_REQUIRE_ORACLES=1 (then it fails).
set -euo pipefail
FS_ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
SERVER=$1
TEST=$2
FS_WORK=$3
modules=$FS_ROOT/tests/oracles/node_modules
if ! command -v node >/dev/null || [[ ! -d $modules/openai || ! -d $modules/tokenizers ]] ||
   ! /usr/bin/python3 -c 'import jinja2' 2>/dev/null; then
  why="needs node, tests/oracles/node_modules with openai (npm ci --prefix tests/oracles)"
  why+=" and python3-jinja2"
  if [[ "${FLATSTATE_REQUIRE_ORACLES:-0}" == 1 ]]; then
    echo "FAIL: $why"
    exit 1
  fi
  echo "skipped: $why"
  exit 77
fi
rm -rf "$FS_WORK"
mkdir -p "$FS_WORK/models"
# shellcheck source=tests/clients/live_server.sh
source "$FS_ROOT/tests/clients/live_server.sh"
trap fs_stop_server EXIT
model_dir=$FS_WORK/models/qwen3-tools
node "$TEST" prepare "$model_dir"

# The binary serves HTTP on the port it is given (0 turns it off): a port free a moment ago, and
# another one if the server exited (some other process took the port before it bound it).
for attempt in 1 2 3; do
  http_port=$(/usr/bin/python3 -c \
    'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if fs_start_server "$SERVER" --http_port "$http_port" --default_model qwen3-tools \
      --device cpu --threads 1; then
    break
  fi
  if [[ -n "${FS_SERVER_PID:-}" ]] || ((attempt == 3)); then exit 1; fi  # hung, or 3 exits
done
FS_BASE_URL=http://127.0.0.1:$http_port/v1 FS_MODEL_DIR=$model_dir FS_WORK=$FS_WORK \
  timeout 120 node "$TEST" run
