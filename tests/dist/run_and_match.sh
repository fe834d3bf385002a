#!/usr/bin/env bash
# usage: run_and_match.sh PATTERN... -- COMMAND [ARG...]
# Passes only when COMMAND exits 0 and its output (stdout and stderr) holds every PATTERN (fixed
# strings). CTest's PASS_REGULAR_EXPRESSION alone ignores the exit code: a tool that printed the
# expected lines and then failed would pass.
set -uo pipefail
patterns=()
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do patterns+=("$1"); shift; done
if [ "$#" -lt 2 ]; then
  echo "run_and_match: usage: run_and_match.sh PATTERN... -- COMMAND [ARG...]" >&2
  exit 2
fi
shift
output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output"
if [ "$status" -ne 0 ]; then
  echo "run_and_match: FAILED: the command exited with status $status" >&2
  exit 1
fi
for pattern in "${patterns[@]}"; do
  if ! grep -qF -- "$pattern" <<<"$output"; then
    echo "run_and_match: FAILED: the output does not contain: $pattern" >&2
    exit 1
  fi
done
