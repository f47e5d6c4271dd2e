#!/usr/bin/env bash
# Every shell script in the repository parses (bash -n): benchmark, setup and tool scripts are
# run rarely and by hand, so a syntax error can sit unnoticed (bench/compare_llamacpp.sh failed
# at parse time for a day: an apostrophe inside ${...:-...} in double quotes). Fails naming each
# script that does not parse.
set -u
cd "$(dirname "$0")/.."
bad=0
checked=0
while IFS= read -r -d '' f; do
  checked=$((checked + 1))
  if ! out=$(bash -n "$f" 2>&1); then
    echo "does not parse: $f"
    echo "$out"
    bad=1
  fi
done < <(find . -path ./build -prune -o -path './build-*' -prune -o -path ./node_modules -prune \
  -o -path ./tests/oracles/node_modules -prune -o -path ./.git -prune -o \
  \( -name '*.sh' -o -path ./.ci/run \) -type f -print0)
echo "$checked scripts checked"
[[ $checked -gt 20 ]] || { echo "too few scripts found ($checked): the search is wrong"; exit 1; }
exit $bad
