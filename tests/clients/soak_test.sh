#!/usr/bin/env bash
# Soak test (docs/reliability.md): starts a flatstate-server on a free loopback port with two small
# random-weight models (linear_elu, softmax) and runs `flatstate-loadtest --mode soak` against it:
# 64 concurrent streams with random cancellations, deadlines and checkpoint/restore calls. Fails
# on any unexpected error status or if the server's RSS grows more than 2 % after the warm-up
# (the first half of the run: RSS settles once the KV pool's high-water mark does).
#
#   bash tests/clients/soak_test.sh SERVER_BIN LOADTEST_BIN WORK_DIR [SECONDS]   # default 60
set -euo pipefail
FS_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SERVER=$1
LOADTEST=$2
FS_WORK=$3
SECS=${4:-60}
rm -rf "$FS_WORK"
mkdir -p "$FS_WORK"
FS_WORK=$(cd "$FS_WORK" && pwd)
# shellcheck source=tests/clients/live_server.sh
source "$FS_ROOT/tests/clients/live_server.sh"
PRUNE_PID=
cleanup() {
  [[ -n "$PRUNE_PID" ]] && kill "$PRUNE_PID" 2>/dev/null
  fs_stop_server
  rm -rf "$FS_WORK/checkpoints"
}
trap cleanup EXIT

SIZE=(--hidden_size 64 --layers 2 --heads 2)
fs_make_model soak-linear-elu linear_elu "${SIZE[@]}"
fs_make_model soak-softmax softmax "${SIZE[@]}"
fs_start_server "$SERVER" --kv_blocks 16384 --max_sessions 512 --threads 2

# The server keeps every checkpoint file (hundreds of MB per minute here): prune those older
# than 30 s (the soak restores by id within milliseconds of taking a checkpoint).
(while sleep 5; do
  find "$FS_WORK/checkpoints" -name '*.ckpt' -mmin +0.5 -delete 2>/dev/null || true
done) &
PRUNE_PID=$!
run_soak() {
  timeout $((SECS + 120)) nice "$LOADTEST" --server "127.0.0.1:$FS_PORT" --mode soak \
    --duration "${SECS}s" --warmup "$((SECS / 2))s" --streams 64 \
    --models soak-linear-elu,soak-softmax --deadline 120s \
    --wait_for_server 30s --progress=false --csv_dir "$FS_WORK/out"
}
run_soak
kill -0 "$FS_SERVER_PID" || { echo "error: the server died" >&2; exit 1; }
echo "soak: PASS (RSS samples in $FS_WORK/out/soak_rss.csv)"
