#!/usr/bin/env bash
# usage: check_row_requests.sh FILE...   (the library's objects; an argument may be a CMake ;-list,
#                                        as $<TARGET_OBJECTS:attnkit> gives)
# Decoding asks for key and value rows ahead of their use (src/cpu/decode_from_rows.inl,
# DecodeRowRequests): without the requests its results are the same, only slower, so no other test
# notices their loss. GCC deletes a call whose only effects are prefetches when it is not inlined
# early, so a restructuring can drop them silently. Every instantiation of the decode scores
# (score_tile_from_key_rows<Rows, Pairs>, with the lambdas it holds) in each target's kernels must
# hold both kinds of request it makes: into L1 (prefetcht0: key rows, and value rows on short
# blocks) and into L2 only (prefetcht1: f32 value rows on long blocks).
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
      if (match($0, /score_tile_from_key_rows<[0-9]+l, (true|false)>/)) { group = substr($0, RSTART, RLENGTH); l1[group] += 0; l2[group] += 0 }
      next
    }
    group != "" && /prefetcht0/ { l1[group]++ }
    group != "" && /prefetcht1/ { l2[group]++ }
    END { for (g in l1) print l1[g], l2[g], g }')
  while read -r into_l1 into_l2 group; do
    [[ -n "$group" ]] || continue
    checked=$((checked + 1))
    if (( into_l1 < 1 || into_l2 < 1 )); then
      echo "$(basename "$file"): $group requests rows into L1 $into_l1 and into L2 $into_l2 times in its code; decoding's row requests are gone"
      status=1
    fi
  done <<< "$counts"
done
(( checked > 0 )) || { echo "check_row_requests: no decode scores found in the objects given" >&2; exit 2; }
[[ $status -eq 0 ]] && echo "decode row requests: $checked instantiations checked"
exit $status
