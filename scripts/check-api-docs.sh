#!/usr/bin/env bash
# Builds the API reference of include/attnkit with Doxygen (docs/Doxyfile) and fails if any public
# symbol lacks its documentation comment or a comment has an error.
#
# Usage: scripts/check-api-docs.sh [OUTPUT_DIR]     (default: build/doxygen)
# Needs doxygen >= 1.9 on PATH. The HTML goes to OUTPUT_DIR/html, the warnings to OUTPUT_DIR/warnings.log.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

out="${1:-build/doxygen}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/warnings.log"
rm -f "$log"

if ! command -v doxygen >/dev/null 2>&1; then
  echo "check-api-docs: doxygen not found on PATH" >&2
  exit 2
fi

version="$(sed -n 's/^project(attnkit VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"

status=0
ATTNKIT_DOXYGEN_OUT="$out" ATTNKIT_VERSION="$version" doxygen docs/Doxyfile || status=$?

if [[ -s "$log" ]]; then
  echo "check-api-docs: $(wc -l <"$log") warning line(s) from doxygen:" >&2
  cat "$log" >&2
  [[ $status -ne 0 ]] || status=1
fi
if [[ $status -ne 0 ]]; then
  echo "check-api-docs: FAILED (doxygen exit status $status); see $log" >&2
  exit "$status"
fi
echo "check-api-docs: no warnings; HTML reference in $out/html/index.html"
