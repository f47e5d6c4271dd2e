#!/usr/bin/env bash
# Throughput vs replica count 1/2/3 through nginx (docs/cluster.md, "Measured"): for each N,
# scripts/cluster.sh with N replicas (--threads 1 each) and flatstate-loadtest --mode concurrency
# through the proxy; with N = 1 also straight to the replica (the proxy's cost).
#   bash scripts/replica_scaling.sh [OUT_DIR]
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/flatstate-replica-scaling}
for N in 1 2 3; do
  C=$OUT/c$N
  rm -rf $C $OUT/out$N
  FLATSTATE_SERVER=build/server/flatstate-server bash scripts/cluster.sh start $C --replicas $N --models_dir models -- --threads 1 --log_requests=false >/dev/null
  source $C/cluster.env
  echo "== replicas $N proxy $PROXY $(date -u +%H:%M:%S)"
  build/clients/loadtest/flatstate-loadtest --server "$PROXY" --mode concurrency \
    --models shakespeare-linear-elu --concurrency 4,16,48 --requests_per_session 2 \
    --prompt_tokens 64 --new_tokens 64 --wait_for_server 30s --progress=false --plots=false \
    --csv_dir $OUT/out$N 2>&1 | grep -v "^PASS"
  if [[ $N == 1 ]]; then
    echo "== replicas 1 direct (no proxy) $REPLICA_1"
    build/clients/loadtest/flatstate-loadtest --server "$REPLICA_1" --mode concurrency \
      --models shakespeare-linear-elu --concurrency 4,16,48 --requests_per_session 2 \
      --prompt_tokens 64 --new_tokens 64 --progress=false --plots=false \
      --csv_dir $OUT/out1direct 2>&1 | grep -v "^PASS"
  fi
  bash scripts/cluster.sh stop $C >/dev/null
done
nproc; uptime

