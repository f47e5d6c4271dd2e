#!/usr/bin/env bash
# ctest: docker-compose.yml must be a valid Compose file. Needs Debian's docker-compose (installed
# by scripts/setup.sh); fails, rather than skips, when it is missing. No Docker engine needed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
command -v docker-compose >/dev/null || {
  echo "error: docker-compose not installed (scripts/setup.sh installs it)" >&2
  exit 1
}
docker-compose -f "$ROOT/docker-compose.yml" --project-directory "$ROOT" config -q
docker-compose -f "$ROOT/docker-compose.yml" --project-directory "$ROOT" config --services |
  sort | tr '\n' ' ' | grep -qx 'loadtest server ' || {
  echo "error: expected services 'server' and 'loadtest'" >&2
  exit 1
}
echo "docker-compose.yml: valid (services server, loadtest)"
