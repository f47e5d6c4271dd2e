#!/usr/bin/env bash
# ctest: the proxy config. deploy/nginx.conf must be deploy/nginx.conf.template rendered for the
# compose topology (`bash deploy/render_nginx_conf.sh --compose > deploy/nginx.conf`); the
# template rendered for loopback upstreams must pass `nginx -t` (skipped, exit 77, without
# nginx); the renderer must refuse bad arguments with exit status 2.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RENDER="$ROOT/deploy/render_nginx_conf.sh"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

bash "$RENDER" --compose >"$TMP/compose.conf"
if ! diff -u "$ROOT/deploy/nginx.conf" "$TMP/compose.conf"; then
  echo "error: deploy/nginx.conf is stale; run: bash deploy/render_nginx_conf.sh --compose >" \
    "deploy/nginx.conf" >&2
  exit 1
fi
echo "deploy/nginx.conf: up to date with the template"

for bad in "--prefix /tmp 127.0.0.1:1" "--listen 1 --prefix rel 127.0.0.1:1" \
  "--listen 1 --prefix /tmp" "--listen 1 --prefix /tmp host" "--listen 1 --prefix /tmp --x 1 h:1"; do
  # shellcheck disable=SC2086  # word splitting of the case is the point
  if bash "$RENDER" $bad >/dev/null 2>"$TMP/err"; then
    echo "error: render_nginx_conf.sh accepted: $bad" >&2
    exit 1
  elif [[ $? -ne 2 ]]; then
    echo "error: render_nginx_conf.sh $bad: expected exit 2" >&2
    exit 1
  fi
done
echo "render_nginx_conf.sh: refuses bad arguments"

NGINX=${FLATSTATE_NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
if [[ ! -x "$NGINX" ]]; then
  echo "SKIP: nginx not installed (scripts/setup.sh installs it); syntax not checked"
  exit 77
fi
bash "$RENDER" --listen 127.0.0.1:1 --prefix "$TMP" --workers 1 127.0.0.1:2 127.0.0.1:3 \
  >"$TMP/nginx.conf"
"$NGINX" -t -q -p "$TMP" -c "$TMP/nginx.conf" -e "$TMP/error.log"
echo "nginx -t: the template renders to a valid config"
