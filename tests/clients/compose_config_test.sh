#!/usr/bin/env bash
# ctest: docker-compose.yml (one server + load test) and docker-compose.cluster.yml (Redis, three
# replicas, the nginx proxy, load test; docs/cluster.md) must be valid Compose files with the
# expected services. Needs Debian's docker-compose (installed by scripts/setup.sh); fails, rather
# than skips, when it is missing. No Docker engine needed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
command -v docker-compose >/dev/null || {
  echo "error: docker-compose not installed (scripts/setup.sh installs it)" >&2
  exit 1
}
# check FILE "SERVICES " (sorted, each followed by one space)
check() {
  docker-compose -f "$ROOT/$1" --project-directory "$ROOT" config -q
  docker-compose -f "$ROOT/$1" --project-directory "$ROOT" config --services |
    sort | tr '\n' ' ' | grep -qx "$2" || {
    echo "error: $1: expected services '$2'" >&2
    exit 1
  }
  echo "$1: valid (services $2)"
}
check docker-compose.yml 'loadtest server '
check docker-compose.cluster.yml 'loadtest proxy redis replica1 replica2 replica3 '
# The proxy of the cluster file serves deploy/nginx.conf (kept current by nginx_conf_test.sh).
# (Output captured first: grep -q stopping early would fail the pipeline under pipefail.)
cluster=$(docker-compose -f "$ROOT/docker-compose.cluster.yml" --project-directory "$ROOT" config)
grep -q 'deploy/nginx.conf:/opt/flatstate/deploy/nginx.conf:ro' <<<"$cluster" || {
  echo "error: docker-compose.cluster.yml: proxy does not mount deploy/nginx.conf" >&2
  exit 1
}
