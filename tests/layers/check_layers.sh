#!/usr/bin/env bash
# Layers only point down (docs/architecture.md): every `#include "<folder>/..."` in src/<layer> must name
# the layer itself or one the table below allows; any other upward or sideways include fails, naming
# the file and the line.
set -euo pipefail
src="$1"

declare -A allowed=(
  [api]="attnkit core dispatch kv_cache"
  [mha]="attnkit core dispatch"
  [dist]="attnkit core dispatch"
  [dispatch]="attnkit core cpu reference"
  [cpu]="attnkit core"
  [reference]="attnkit core"
  [kv_cache]="attnkit core"  # the KV cache's sizes, block tables and pools, under api's KVCache
  [core]="attnkit"
  [io]="attnkit"
  [c_api]="attnkit"  # the C API: over the public C++ API only
)
# file: included header, for a front end that has to reach into a backend (the list is empty).
known_exceptions=()

status=0
for layer in "${!allowed[@]}"; do
  [[ -d "$src/$layer" ]] || { echo "no folder src/$layer"; status=1; continue; }
  while IFS= read -r hit; do
    file="${hit%%:*}"; rest="${hit#*:}"; line="${rest%%:*}"
    header=$(sed -n 's/.*#include "\([^"]*\)".*/\1/p' <<<"$rest")
    folder="${header%%/*}"
    [[ "$header" == */* ]] || continue  # same-folder includes by bare name
    [[ "$folder" == "$layer" ]] && continue
    [[ " ${allowed[$layer]} " == *" $folder "* ]] && continue
    relative="${file#"$src"/}"
    [[ " ${known_exceptions[*]} " == *" $relative:$header "* ]] && continue
    echo "src/$relative:$line includes \"$header\": layer $layer may include only ${allowed[$layer]}"
    status=1
  done < <(grep -rn '#include "' "$src/$layer" || true)
done
# Every layer folder of src/ is in the table, so a new one has to say where it sits.
for dir in "$src"/*/; do
  name=$(basename "$dir")
  [[ -n "${allowed[$name]+x}" ]] || { echo "src/$name is not in the layer table of tests/layers/check_layers.sh"; status=1; }
done
[[ $status -eq 0 ]] && echo "layers point down: ${#allowed[@]} layers checked"
exit $status
