#!/usr/bin/env bash
# The CLI's main commands under valgrind's memcheck: no invalid read or write, no use of
# uninitialised memory, no definite leak. Uses the release build's binary (scripts/check.sh builds it
# first); inputs are small so that the whole run takes a few tens of seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin="${ATTNKIT_BIN:-$PWD/build/bin/attnkit}"
if ! command -v valgrind >/dev/null; then
  echo "check-valgrind: valgrind is not installed (Debian: apt-get install valgrind)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

python3 "$root/scripts/small_inputs.py"  # q, k, v, do.npy: small random float32 inputs

failed=0
# Each command with the exit code it must give: memcheck's own findings exit with 99.
check() {
  local expected=$1
  shift
  local status=0
  valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite "$bin" "$@" \
    >/dev/null 2>valgrind.txt || status=$?
  if [ "$status" -ne "$expected" ]; then
    echo "check-valgrind: 'attnkit $*' exited $status, expected $expected" >&2
    cat valgrind.txt >&2
    failed=1
  else
    echo "  clean: attnkit $*"
  fi
}
check 0 explain
check 0 info
check 0 run --q q.npy --k k.npy --v v.npy --out o.npy --lse l.npy --probs p.npy --causal top-left
check 0 run --q q.npy --k k.npy --v v.npy --out o.npy --dtype bf16 --softcap 5 --window 3,0
check 0 heatmap --probs p.npy --out h.png --html h.html
check 0 heatmap --demo --out d.png
check 0 lab scaling --trials 2
check 0 lab precision --lengths 16,64
check 0 bench --soak 8 --seed 1 --threads 2                  # random calls of every kind, checked
check 1 run --q q.npy --k k.npy --v missing.npy --out o.npy  # a file error: exit 1, still clean
check 2 run --q q.npy --no-such-flag                          # a usage error: exit 2, still clean
exit $failed
