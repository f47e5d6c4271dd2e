#!/usr/bin/env bash
# ctest wrapper: starts flatstate-server on a free loopback port (random models, auth token) and
# runs tests/clients/python_client_test.py against it with Debian's /usr/bin/python3.
#   python_client_test.sh SERVER_BIN STUBS_DIR WORK_DIR
set -euo pipefail
FS_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SERVER=$1
STUBS=$2
FS_WORK=$3
mkdir -p "$FS_WORK"
# shellcheck source=tests/clients/live_server.sh
source "$FS_ROOT/tests/clients/live_server.sh"
trap fs_stop_server EXIT
fs_make_model ci-linear-elu linear_elu --hidden_size 64 --layers 2 --heads 2
fs_make_model ci-softmax softmax --hidden_size 64 --layers 2 --heads 2
TOKEN=python-client-test-token
fs_start_server "$SERVER" --auth_token "$TOKEN" --kv_blocks 512 --threads 2
FLATSTATE_SERVER=127.0.0.1:$FS_PORT FLATSTATE_AUTH_TOKEN=$TOKEN FLATSTATE_SOURCE_DIR=$FS_ROOT \
  FLATSTATE_PYTHON_STUBS=$STUBS PYTHONPATH=$FS_ROOT/clients/python \
  timeout 240 /usr/bin/python3 "$FS_ROOT/tests/clients/python_client_test.py"
