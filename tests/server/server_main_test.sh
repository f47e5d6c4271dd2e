#!/usr/bin/env bash
# flatstate-server's operator output (server/main.cc): --help lists the server's own flags with
# their defaults; after start, one line per listener says where it listens and whether auth is
# on; listening beyond loopback with no auth token prints a warning, and loopback or a token does
# not. Usage: server_main_test.sh <flatstate-server> <repository root>
set -uo pipefail
BIN=$1
ROOT=$2
tmp=$(mktemp -d)
pid=
trap '[[ -n "$pid" ]] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

help=$("$BIN" --help 2>&1)
for want in "--models_dir" "--auth_token_file" "--http_port" "default: 8000" "--kv_dtype"; do
  grep -qF -- "$want" <<<"$help" || fail "--help does not mention '$want'"
done
grep -q "No flags matched" <<<"$help" && fail "--help matched no flags"

mkdir -p "$tmp/models"
ln -s "$ROOT/models/shakespeare-linear-elu" "$tmp/models/tiny"
# Starts the server with extra flags, waits for it to serve, prints its stderr, stops it.
run() {
  # Empty the log before the start: the background child truncates it only once it runs, and the
  # wait below must not see the previous run's "serving on".
  : >"$tmp/err"
  "$BIN" --models_dir "$tmp/models" --port 0 --http_port 0 --metrics_port 0 \
    --checkpoint_dir "$tmp/ckpt" --threads 1 "$@" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  for _ in $(seq 600); do
    grep -q "serving on" "$tmp/err" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  cat "$tmp/err"
}

open=$(run --host 0.0.0.0)
grep -q "gRPC listening on 0.0.0.0:[0-9]* (auth off, TLS off)" <<<"$open" || fail "no gRPC line: $open"
grep -q "WARNING: listening on 0.0.0.0, beyond loopback, with no auth token" <<<"$open" ||
  fail "no warning without auth beyond loopback: $open"

echo -n "s3cret" >"$tmp/token"
guarded=$(run --host 0.0.0.0 --auth_token_file "$tmp/token")
grep -q "gRPC listening on 0.0.0.0:[0-9]* (auth on" <<<"$guarded" || fail "auth not reported: $guarded"
grep -q "WARNING" <<<"$guarded" && fail "warned although auth is on: $guarded"

local_only=$(run --host 127.0.0.1)
grep -q "gRPC listening on 127.0.0.1:[0-9]*" <<<"$local_only" || fail "no gRPC line: $local_only"
grep -q "WARNING" <<<"$local_only" && fail "warned on loopback: $local_only"
echo "1 passed, 0 failed"
