# Helpers for tests that need a live flatstate-server on a free loopback port. Source it; it
# defines functions only. The caller sets FS_WORK (a scratch folder) and should
# `trap fs_stop_server EXIT` so the server never outlives the test.
#
#   fs_make_model NAME KIND [make_random_model.py flags...]  # into $FS_WORK/models (reused)
#   fs_start_server SERVER_BIN [server flags...]  # sets FS_PORT, FS_SERVER_PID; log in
#                                                 # $FS_WORK/server.log
#   fs_stop_server                                # SIGTERM + wait; idempotent

fs_make_model() {
  local name=$1 kind=$2
  shift 2
  if [[ -f "$FS_WORK/models/$name/model.safetensors" ]]; then return 0; fi
  mkdir -p "$FS_WORK/models"
  nice /usr/bin/python3 "$FS_ROOT/tools/make_random_model.py" --name "$name" --kind "$kind" \
    --out_dir "$FS_WORK/models" --force "$@" >/dev/null
}

fs_start_server() {
  local bin=$1
  shift
  : >"$FS_WORK/server.port"
  # --port 0: the server binds a free port and prints "port N" on stdout.
  "$bin" --host 127.0.0.1 --port 0 --metrics_port 0 --http_port 0 --models_dir "$FS_WORK/models" \
    --checkpoint_dir "$FS_WORK/checkpoints" --log_requests=false "$@" \
    >"$FS_WORK/server.port" 2>"$FS_WORK/server.log" &
  FS_SERVER_PID=$!
  local i
  for ((i = 0; i < 600; i++)); do  # model loading: up to 60 s
    FS_PORT=$(awk '/^port /{print $2; exit}' "$FS_WORK/server.port")
    if [[ -n "$FS_PORT" ]]; then
      echo "flatstate-server pid $FS_SERVER_PID on 127.0.0.1:$FS_PORT"
      return 0
    fi
    if ! kill -0 "$FS_SERVER_PID" 2>/dev/null; then
      echo "error: flatstate-server exited during start-up:" >&2
      cat "$FS_WORK/server.log" >&2
      FS_SERVER_PID=
      return 1
    fi
    sleep 0.1
  done
  echo "error: flatstate-server printed no port within 60 s" >&2
  return 1
}

fs_stop_server() {
  if [[ -n "${FS_SERVER_PID:-}" ]]; then
    kill -TERM "$FS_SERVER_PID" 2>/dev/null || true
    wait "$FS_SERVER_PID" 2>/dev/null || true
    FS_SERVER_PID=
  fi
}
