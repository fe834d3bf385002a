#!/usr/bin/env bash
# usage: check_row_requests.sh FILE...   (the library's objects; an argument may be a CMake ;-list,
#                                        as $<TARGET_OBJECTS:attnkit> gives)
# Decoding asks for key and value rows ahead of their use (src/cpu/decode_from_rows.inl,
# DecodeRowRequests): without the requests its results are the same, only slower, so no other test
# notices their loss. GCC deletes a call whose only effects are prefetches when it is not inlined
# early, so a restructuring can drop them silently. Every instantiation of the decode scores
# (score_tile_from_key_rows<Rows, Pairs>, with the lambdas it holds) in each target's kernels must
# hold at least two prefetch instructions: a key row's request and a value row's.
set -euo pipefail
files=()
for argument in "$@"; do
  IFS=';' read -r -a listed <<< "$argument"
  files+=("${listed[@]}")
done
status=0 checked=0
for file in "${files[@]}"; do
  [[ "$(basename "$file")" == kernels_*.o ]] || continue
  counts=$(objdump -d --no-show-raw-insn -C "$file" | awk '
    /^[0-9a-f]+ <.*>:$/ {
      group = ""
      if (match($0, /score_tile_from_key_rows<[0-9]+l, (true|false)>/)) { group = substr($0, RSTART, RLENGTH); seen[group] += 0 }
      next
    }
    group != "" && /prefetch/ { seen[group]++ }
    END { for (g in seen) print seen[g], g }')
  while read -r count group; do
    [[ -n "$group" ]] || continue
    checked=$((checked + 1))
    if (( count < 2 )); then
      echo "$(basename "$file"): $group holds $count prefetch instruction(s); decoding's row requests are gone"
      status=1
    fi
  done <<< "$counts"
done
(( checked > 0 )) || { echo "check_row_requests: no decode scores found in the objects given" >&2; exit 2; }
[[ $status -eq 0 ]] && echo "decode row requests: $checked instantiations checked"
exit $status
