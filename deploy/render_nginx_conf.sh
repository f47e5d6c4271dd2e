#!/usr/bin/env bash
# Renders deploy/nginx.conf.template (nginx as the gRPC proxy of N flatstate replicas) to stdout.
#   render_nginx_conf.sh --listen [ADDR:]PORT --prefix DIR [--error_log DEST] [--access_log DEST]
#                        [--workers N|auto] [--max_fails N] [--fail_timeout T] HOST:PORT...
# --prefix: an existing directory for the pid file and nginx's temp folders (absolute path);
# --error_log / --access_log default to DIR/error.log and DIR/access.log (docker: stderr and
# /dev/stdout); --workers defaults to auto; each HOST:PORT is one replica. Exits 2 on bad usage.
#   render_nginx_conf.sh --compose > deploy/nginx.conf
# renders the committed config of docker-compose.cluster.yml (replica1..3:50051, stdout/stderr
# logs); tests/clients/nginx_conf_test.sh checks deploy/nginx.conf is that output.
# Used by scripts/cluster.sh, tests/util/nginx_process.cc and tests/clients/nginx_conf_test.sh.
set -euo pipefail
shopt -u patsub_replacement 2>/dev/null || true  # bash 5.2: '&' in a replacement is literal
TEMPLATE="$(cd "$(dirname "$0")" && pwd)/nginx.conf.template"

die() {
  echo "render_nginx_conf.sh: $*" >&2
  exit 2
}

listen="" prefix="" error_log="" access_log="" workers=auto max_fails=1 fail_timeout=10s
upstreams=()
if [[ "${1:-}" == "--compose" ]]; then
  (($# == 1)) || die "--compose takes no other argument"
  set -- --listen 50051 --prefix /tmp --error_log stderr --access_log /dev/stdout \
    replica1:50051 replica2:50051 replica3:50051
fi
while (($#)); do
  case "$1" in
    --listen | --prefix | --error_log | --access_log | --workers | --max_fails | --fail_timeout)
      (($# >= 2)) || die "$1 needs a value"
      declare "${1#--}=$2"
      shift 2
      ;;
    --*) die "unknown flag '$1'" ;;
    *)
      [[ "$1" =~ ^[A-Za-z0-9._-]+:[0-9]+$ ]] || die "upstream '$1' is not HOST:PORT"
      upstreams+=("$1")
      shift
      ;;
  esac
done
[[ -n "$listen" ]] || die "--listen is required"
[[ "$listen" =~ ^([0-9.]+:|\[[0-9a-fA-F:]+\]:)?[0-9]+$ ]] || die "--listen '$listen' is not [ADDR:]PORT"
[[ "$prefix" == /* ]] || die "--prefix must be an absolute path (got '$prefix')"
[[ "$workers" =~ ^([0-9]+|auto)$ ]] || die "--workers '$workers' is not a number or auto"
[[ "$max_fails" =~ ^[0-9]+$ ]] || die "--max_fails '$max_fails' is not a number"
[[ "$fail_timeout" =~ ^[0-9]+(ms|s|m)?$ ]] || die "--fail_timeout '$fail_timeout' is not a time"
((${#upstreams[@]})) || die "give at least one upstream HOST:PORT"
prefix=${prefix%/}
[[ -n "$error_log" ]] || error_log="$prefix/error.log"
[[ -n "$access_log" ]] || access_log="$prefix/access.log"

while IFS= read -r line; do
  if [[ "$line" =~ ^([[:space:]]*)@UPSTREAMS@$ ]]; then
    for u in "${upstreams[@]}"; do
      printf '%sserver %s max_fails=%s fail_timeout=%s;\n' "${BASH_REMATCH[1]}" "$u" \
        "$max_fails" "$fail_timeout"
    done
    continue
  fi
  line=${line//@LISTEN@/$listen}
  line=${line//@PREFIX@/$prefix}
  line=${line//@ERROR_LOG@/$error_log}
  line=${line//@ACCESS_LOG@/$access_log}
  line=${line//@WORKERS@/$workers}
  [[ "$line" != *@[A-Z_]*@* ]] || die "unfilled placeholder in: $line"
  printf '%s\n' "$line"
done <"$TEMPLATE"
