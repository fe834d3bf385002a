#!/usr/bin/env bash
# usage: check_isa_isolation.sh FILE...   (objects or linked programs; an argument may be a CMake
#                                        ;-list, as $<TARGET_OBJECTS:attnkit> gives)
# Every AVX instruction (VEX or EVEX encoded: the mnemonics that start with "v") and every AMX tile
# instruction (tile*, tdp*, ldtilecfg, sttilecfg) in an object or program
# must lie in a function that only runs once dispatch has checked the CPU: a target's kernels (its
# *_target namespace), its vector wrapper (*Isa) and the helpers included only inside target regions,
# the bench's per-ISA peak and read loops, and the tests' per-ISA helpers. Anything else is code shared with the
# baseline path that the compiler built for AVX: a CPU without AVX would die of an illegal instruction
# there, whichever target it runs (src/cpu/target_region.hpp).
set -euo pipefail
allowed='_target::|Avx2Isa|Avx512Isa|Avx512Bf16Isa|Emulated16Isa|Emulated16Bf16Isa|AmxBf16Isa|EmulatedAmxBf16Isa|AmxFp16Isa|EmulatedAmxFp16Isa|'
allowed+='AmxTiles|transpose_8x8|'
allowed+='fma_loop_avx2|fma_loop_avx512|bf16_dot_loop_avx512|amx_bf16_loop|read_loop_avx2|hardware_tile_product|'
allowed+='emulated_dot_bf16|emulated_round_to_bf16|hardware_dot_bf16|hardware_round_to_bf16|round_into_pairs|store_row_pairs|pair_rows_32|avx512_lane_sums'
files=()
for argument in "$@"; do
  IFS=';' read -r -a listed <<< "$argument"
  files+=("${listed[@]}")
done
[ "${#files[@]}" -gt 0 ] || { echo "check_isa_isolation: no file to check" >&2; exit 2; }
status=0
for program in "${files[@]}"; do
  [ -f "$program" ] || { echo "check_isa_isolation: missing file: $program" >&2; exit 2; }
  offenders=$(objdump -d --no-show-raw-insn -C "$program" | awk -v allowed="$allowed" '
    /^[0-9a-f]+ <.*>:$/ { function_name = $0; next }
    /^ *[0-9a-f]+:\t/ {
      split($0, field, "\t"); mnemonic = field[2]; sub(/ .*/, "", mnemonic)
      if (mnemonic ~ /^(v|tile|tdp|ldtilecfg|sttilecfg)/ && function_name !~ allowed) first[function_name] = mnemonic
    }
    END { for (f in first) print "  " f "  (" first[f] ")" }')
  if [ -n "$offenders" ]; then
    echo "check_isa_isolation: $program: AVX or AMX instructions outside the target code:"
    echo "$offenders" | head -40
    status=1
  fi
done
if [ "$status" -eq 0 ]; then echo "check_isa_isolation: ${#files[@]} files: AVX and AMX instructions only in target code"; fi
exit "$status"
