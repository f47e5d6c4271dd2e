#!/usr/bin/env bash
# Migration mode of the load tester (docs/loadtest.md): starts redis-server + 2 replicas (+ nginx)
# with scripts/cluster.sh on free loopback ports, with two tiny random-weight models (linear_elu,
# softmax), runs `flatstate-loadtest --mode migration` from replica 1 to replica 2 at contexts
# 256 and 1k, and checks migration.csv: two measured rows per model, the linear model moves the
# same bytes at both contexts (within 64), the softmax model more at 1k than at 256. Exit 77
# (skip) when redis-server or nginx is not installed.
#
#   bash tests/clients/migration_test.sh SERVER_BIN LOADTEST_BIN WORK_DIR
set -euo pipefail
FS_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SERVER=$1
LOADTEST=$2
FS_WORK=$3
command -v "${REDIS_SERVER:-redis-server}" >/dev/null || { echo "SKIP: redis-server not installed"; exit 77; }
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || { echo "SKIP: nginx not installed"; exit 77; }
rm -rf "$FS_WORK"
mkdir -p "$FS_WORK"
FS_WORK=$(cd "$FS_WORK" && pwd)
# shellcheck source=tests/clients/live_server.sh
source "$FS_ROOT/tests/clients/live_server.sh"
CLUSTER="$FS_WORK/cluster"
cleanup() {
  [[ -d "$CLUSTER/pids" ]] && bash "$FS_ROOT/scripts/cluster.sh" stop "$CLUSTER" >/dev/null || true
}
trap cleanup EXIT

SIZE=(--hidden_size 64 --layers 2 --heads 2)
fs_make_model mig-linear-elu linear_elu "${SIZE[@]}"
fs_make_model mig-softmax softmax "${SIZE[@]}"
FLATSTATE_SERVER=$SERVER bash "$FS_ROOT/scripts/cluster.sh" start "$CLUSTER" --replicas 2 \
  --models_dir "$FS_WORK/models" -- --kv_blocks 1024 --threads 1 --log_requests=false
# shellcheck source=/dev/null
source "$CLUSTER/cluster.env"
timeout 300 "$LOADTEST" --server "$REPLICA_1" --target "$REPLICA_2" --mode migration \
  --models mig-linear-elu,mig-softmax --contexts 256,1k --chunk_tokens 512 \
  --wait_for_server 30s --progress=false --csv_dir "$FS_WORK/out"

CSV="$FS_WORK/out/migration.csv"
cat "$CSV"
/usr/bin/python3 - "$CSV" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def moved(model):
    r = [x for x in rows if x["model"] == model]
    assert len(r) == 2, f"{model}: {len(r)} rows, want 2"
    for x in r:
        assert not x["skipped"], f"{model}: skipped: {x['skipped']}"
        assert int(x["writes_per_turn"]) >= 1 and int(x["write_bytes_per_turn"]) > 0, x
        assert float(x["resume_first_token_ms"]) > 0, x
        assert float(x["write_ms_per_turn"]) > 0 and float(x["load_ms"]) > 0, x
    return [int(x["bytes_moved"]) for x in r]
lin, soft = moved("mig-linear-elu"), moved("mig-softmax")
# Same up to the checkpoint's few variable bytes (pending UTF-8 text tail, varint counters).
assert lin[0] > 0 and abs(lin[0] - lin[1]) <= 64, f"linear bytes moved differ: {lin}"
assert soft[1] > soft[0] > 0, f"softmax bytes moved do not grow: {soft}"
print(f"migration: PASS (linear {lin}, softmax {soft} bytes moved)")
PY
