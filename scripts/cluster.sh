#!/usr/bin/env bash
# The cluster topology of docs/cluster.md without Docker, on free loopback ports: a real
# redis-server (the shared session store), N flatstate-server replicas and nginx as the gRPC
# proxy (deploy/nginx.conf.template). Runs as any user; everything it writes is under DIR.
#
#   scripts/cluster.sh start [DIR] [--replicas N] [--store redis|dir] [--models_dir PATH]
#                            [--session_lease D] [--session_ttl D] [-- SERVER_FLAGS...]
#   scripts/cluster.sh status DIR
#   scripts/cluster.sh kill DIR N      # SIGKILL replica N (failover drills)
#   scripts/cluster.sh stop DIR
#
# start: DIR defaults to a new /tmp/flatstate-cluster.XXXXXX; it must be empty or absent. It
# prints the proxy address and each replica's address, metrics address and pid, and writes them
# to DIR/cluster.env (shell syntax: PROXY, REDIS, REPLICAS, REPLICA_<i>, REPLICA_<i>_PID, ...).
# Logs: DIR/logs/*.log. --store redis (default): replicas share redis://REDIS/0 and are named
# replica-<i> (--session_store, --replica_id; --session_lease/--session_ttl only when given).
# --store dir: no Redis, each replica keeps its own checkpoint directory (sessions stay on the
# replica that made them: affinity only, no failover). SERVER_FLAGS go to every replica.
# Binaries: $FLATSTATE_SERVER (default build/server/flatstate-server), $NGINX (nginx on PATH or
# /usr/sbin/nginx), $REDIS_SERVER (redis-server). On a failed start everything started is
# stopped again and the failing log is shown; exit status 1 (2: bad usage).
# stop: SIGTERM to the proxy, the replicas and Redis, SIGKILL after 15 s; exit 0 when all ended.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

die() {
  echo "cluster.sh: $*" >&2
  exit 2
}

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# alive PID: the process exists and is not a zombie (a killed child of an exited cluster.sh stays
# a zombie where PID 1 does not reap, and kill -0 still succeeds on it).
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ "$state" != Z* ]]
}

accepts() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

find_nginx() {
  if [[ -n "${NGINX:-}" ]]; then echo "$NGINX"; return; fi
  command -v nginx 2>/dev/null || { [[ -x /usr/sbin/nginx ]] && echo /usr/sbin/nginx; } || true
}

# spawn NAME LOG CMD...: starts CMD in the background, records its pid in DIR/pids/NAME.pid.
spawn() {
  local name=$1 log=$2
  shift 2
  nohup "$@" >"$log" 2>&1 </dev/null &
  echo $! >"$DIR/pids/$name.pid"
}

# wait_up NAME PORT LOG: until PORT accepts (60 s); fails if the process died first.
wait_up() {
  local name=$1 port=$2 log=$3 pid
  pid=$(cat "$DIR/pids/$name.pid")
  for _ in $(seq 600); do
    if ! alive "$pid"; then
      echo "cluster.sh: $name exited during start; $log:" >&2
      tail -n 20 "$log" >&2
      return 1
    fi
    if accepts "$port"; then return 0; fi
    sleep 0.1
  done
  echo "cluster.sh: $name did not accept on 127.0.0.1:$port within 60 s; $log:" >&2
  tail -n 20 "$log" >&2
  return 1
}

# stop_pid NAME: SIGTERM, wait up to 15 s, then SIGKILL; removes the pid file.
stop_pid() {
  local f="$DIR/pids/$1.pid" pid
  [[ -f "$f" ]] || return 0
  pid=$(cat "$f")
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 150); do
      alive "$pid" || break
      sleep 0.1
    done
    if alive "$pid"; then
      echo "cluster.sh: $1 (pid $pid) ignored SIGTERM for 15 s: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$f"
}

cmd_stop() {
  [[ -d "$DIR/pids" ]] || die "$DIR is not a cluster directory (no pids/)"
  stop_pid nginx
  local f
  for f in "$DIR"/pids/replica-*.pid; do
    [[ -e "$f" ]] && stop_pid "$(basename "$f" .pid)"
  done
  stop_pid redis
  echo "cluster in $DIR stopped"
}

cmd_status() {
  [[ -f "$DIR/cluster.env" ]] || die "$DIR/cluster.env not found"
  cat "$DIR/cluster.env"
  local f
  for f in "$DIR"/pids/*.pid; do
    [[ -e "$f" ]] || continue
    if alive "$(cat "$f")"; then
      echo "$(basename "$f" .pid): running (pid $(cat "$f"))"
    else
      echo "$(basename "$f" .pid): NOT running (pid $(cat "$f"))"
    fi
  done
}

cmd_kill() {
  local f="$DIR/pids/replica-$1.pid"
  [[ -f "$f" ]] || die "no replica $1 in $DIR"
  kill -KILL "$(cat "$f")" 2>/dev/null || true
  echo "replica-$1 (pid $(cat "$f")) killed with SIGKILL"
}

# A start that failed: stop whatever started, exit 1.
start_failed() {
  echo "cluster.sh: start failed; stopping what started (logs in $DIR/logs)" >&2
  cmd_stop >/dev/null 2>&1 || true
  exit 1
}

cmd_start() {
  local replicas=3 store=redis models="$ROOT/models" lease="" ttl=""
  local server_flags=()
  while (($#)); do
    case "$1" in
      --replicas) replicas=${2:?}; shift 2 ;;
      --store) store=${2:?}; shift 2 ;;
      --models_dir) models=${2:?}; shift 2 ;;
      --session_lease) lease=${2:?}; shift 2 ;;
      --session_ttl) ttl=${2:?}; shift 2 ;;
      --) shift; server_flags=("$@"); break ;;
      *) die "start: unknown argument '$1'" ;;
    esac
  done
  [[ "$replicas" =~ ^[1-9][0-9]?$ ]] || die "--replicas must be 1..99"
  [[ "$store" == redis || "$store" == dir ]] || die "--store must be redis or dir"
  local server=${FLATSTATE_SERVER:-$ROOT/build/server/flatstate-server}
  local nginx redis_bin=${REDIS_SERVER:-redis-server}
  nginx=$(find_nginx)
  [[ -x "$server" ]] || die "flatstate-server not found at $server (build it or set FLATSTATE_SERVER)"
  [[ -n "$nginx" ]] || die "nginx not installed (scripts/setup.sh installs it) or set NGINX"
  if [[ "$store" == redis ]]; then
    command -v "$redis_bin" >/dev/null || die "redis-server not found (set REDIS_SERVER)"
  fi
  [[ -d "$models" ]] || die "models directory $models not found"
  models=$(cd "$models" && pwd)
  mkdir -p "$DIR/pids" "$DIR/logs" "$DIR/nginx"
  local env="$DIR/cluster.env"
  echo "CLUSTER_DIR=$DIR" >"$env"

  local store_flags=()
  if [[ "$store" == redis ]]; then
    local rport
    rport=$(free_port)
    mkdir -p "$DIR/redis"
    spawn redis "$DIR/logs/redis.log" "$redis_bin" --bind 127.0.0.1 --port "$rport" \
      --dir "$DIR/redis" --save "" --appendonly yes --daemonize no
    wait_up redis "$rport" "$DIR/logs/redis.log" || start_failed
    echo "REDIS=127.0.0.1:$rport" >>"$env"
    echo "REDIS_PID=$(cat "$DIR/pids/redis.pid")" >>"$env"
    store_flags=("--session_store=redis://127.0.0.1:$rport/0")
    [[ -z "$lease" ]] || store_flags+=("--session_lease=$lease")
    [[ -z "$ttl" ]] || store_flags+=("--session_ttl=$ttl")
  fi

  local upstreams=() i port mport
  echo "REPLICAS=$replicas" >>"$env"
  for ((i = 1; i <= replicas; i++)); do
    port=$(free_port)
    mport=$(free_port)
    mkdir -p "$DIR/replica-$i/checkpoints"
    local id_flag=()
    [[ "$store" == dir ]] || id_flag=("--replica_id=replica-$i")
    spawn "replica-$i" "$DIR/logs/replica-$i.log" "$server" --host=127.0.0.1 --port="$port" \
      --metrics_port="$mport" --http_port=0 --models_dir="$models" \
      --checkpoint_dir="$DIR/replica-$i/checkpoints" "${store_flags[@]}" "${id_flag[@]}" \
      "${server_flags[@]}"
    upstreams+=("127.0.0.1:$port")
    {
      echo "REPLICA_$i=127.0.0.1:$port"
      echo "REPLICA_${i}_METRICS=127.0.0.1:$mport"
      echo "REPLICA_${i}_PID=$(cat "$DIR/pids/replica-$i.pid")"
    } >>"$env"
  done
  for ((i = 1; i <= replicas; i++)); do
    wait_up "replica-$i" "${upstreams[i - 1]##*:}" "$DIR/logs/replica-$i.log" || start_failed
  done

  local pport
  pport=$(free_port)
  bash "$ROOT/deploy/render_nginx_conf.sh" --listen "127.0.0.1:$pport" --prefix "$DIR/nginx" \
    "${upstreams[@]}" >"$DIR/nginx/nginx.conf" || start_failed
  spawn nginx "$DIR/logs/nginx.log" "$nginx" -p "$DIR/nginx" -c "$DIR/nginx/nginx.conf" \
    -e "$DIR/nginx/error.log" -g "daemon off;"
  wait_up nginx "$pport" "$DIR/nginx/error.log" || start_failed
  {
    echo "PROXY=127.0.0.1:$pport"
    echo "NGINX_PID=$(cat "$DIR/pids/nginx.pid")"
    echo "NGINX_ACCESS_LOG=$DIR/nginx/access.log"
  } >>"$env"

  echo "flatstate cluster in $DIR (store: $store)"
  echo "  proxy:     127.0.0.1:$pport  (nginx pid $(cat "$DIR/pids/nginx.pid"))"
  [[ "$store" == dir ]] || echo "  redis:     $(grep ^REDIS= "$env" | cut -d= -f2)"
  for ((i = 1; i <= replicas; i++)); do
    echo "  replica-$i: ${upstreams[i - 1]}  metrics $(grep "^REPLICA_${i}_METRICS=" "$env" |
      cut -d= -f2)  pid $(cat "$DIR/pids/replica-$i.pid")"
  done
  echo "  stop with: scripts/cluster.sh stop $DIR"
}

(($#)) || die "usage: cluster.sh start [DIR] [...] | status DIR | kill DIR N | stop DIR"
action=$1
shift
case "$action" in
  start)
    if (($#)) && [[ "$1" != --* ]]; then
      DIR=$1
      shift
      [[ ! -e "$DIR" || -z "$(ls -A "$DIR")" ]] || die "$DIR exists and is not empty"
      mkdir -p "$DIR"
      DIR=$(cd "$DIR" && pwd)
    else
      DIR=$(mktemp -d /tmp/flatstate-cluster.XXXXXX)
    fi
    cmd_start "$@"
    ;;
  stop | status | kill)
    (($#)) || die "$action needs the cluster DIR"
    DIR=$(cd "$1" && pwd) || die "no directory $1"
    shift
    case "$action" in
      stop) cmd_stop ;;
      status) cmd_status ;;
      kill) (($# == 1)) || die "kill DIR N"; cmd_kill "$1" ;;
    esac
    ;;
  *) die "unknown command '$action' (start | status | kill | stop)" ;;
esac
