#!/usr/bin/env bash
# ctest: scripts/cluster.sh end to end with flatstate-cli as the client. Starts two replicas and
# nginx (and Redis when this flatstate-server knows --session_store; else --store dir), runs
# calls through the proxy, checks the access log for the CLI's x-flatstate-session header,
# SIGKILLs a replica (`cluster.sh kill`) and checks new calls still succeed, then `cluster.sh
# stop` must leave no process behind. Exit 77 (skip) without nginx.
#   cluster_script_test.sh SERVER_BIN CLI_BIN WORK_DIR
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SERVER=$1
CLI=$2
WORK=$3
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || {
  echo "SKIP: nginx not installed (scripts/setup.sh installs it)"
  exit 77
}
store=dir
help=$("$SERVER" --helpfull 2>&1 || true)
if grep -q -- '--session_store' <<<"$help" && command -v redis-server >/dev/null; then
  store=redis
fi
rm -rf "$WORK"
mkdir -p "$WORK"
C="$WORK/cluster"
trap 'bash "$ROOT/scripts/cluster.sh" stop "$C" >/dev/null 2>&1 || true' EXIT
FLATSTATE_SERVER=$SERVER bash "$ROOT/scripts/cluster.sh" start "$C" --store "$store" \
  --replicas 2 -- --threads=1 --kv_blocks=512 --log_requests=false
# shellcheck source=/dev/null
source "$C/cluster.env"
cli() { "$CLI" --server="$PROXY" --timeout=60 "$@"; }

cli models >/dev/null
for _ in 1 2 3 4; do
  cli generate --prompt "ROMEO:" --max_new_tokens 8 --stats=false >/dev/null
done
sid=0123456789abcdef0123456789abcdef  # no such session: NOT_FOUND from a replica
if cli session info "$sid" 2>"$WORK/err"; then
  echo "error: session info of an unknown session succeeded" >&2
  exit 1
fi
grep -q NOT_FOUND "$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
if [[ "$store" == redis ]]; then  # any replica serves any session through the store
  sid=$(cli session create --temperature 0 | awk '/^session_id:/{print $2}')
  cli generate --session "$sid" --prompt "To be" --max_new_tokens 8 --stats=false >/dev/null
  cli generate --session "$sid" --prompt "" --max_new_tokens 8 --stats=false >/dev/null
  info=$(cli session info "$sid")
  grep -q "context_tokens: 21" <<<"$info" || { echo "error: $info" >&2; exit 1; }
fi
sleep 0.2  # nginx logs a request when it ends, just after the client has its status
grep -q "session=\"$sid\"" "$NGINX_ACCESS_LOG" || {
  echo "error: no access-log line with x-flatstate-session $sid:" >&2
  cat "$NGINX_ACCESS_LOG" >&2
  exit 1
}
[[ $(grep -c 'uri=/flatstate.v1.Inference/Generate' "$NGINX_ACCESS_LOG") -ge 4 ]]

bash "$ROOT/scripts/cluster.sh" kill "$C" 1
for _ in 1 2 3 4; do
  cli generate --prompt "ROMEO:" --max_new_tokens 8 --stats=false >/dev/null
done
status=$(bash "$ROOT/scripts/cluster.sh" status "$C")  # captured: grep -q would cut a pipe
grep -q "replica-1: NOT running" <<<"$status"

pids=$(cat "$C"/pids/*.pid)
bash "$ROOT/scripts/cluster.sh" stop "$C"
for p in $pids; do
  state=$(ps -o stat= -p "$p" 2>/dev/null) || continue  # gone
  if [[ "$state" != Z* ]]; then  # a zombie has ended (PID 1 may not reap here)
    echo "error: pid $p still running after stop" >&2
    exit 1
  fi
done
echo "cluster.sh: start, calls through the proxy, kill, stop: OK (store: $store)"
