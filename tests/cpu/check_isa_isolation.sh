#!/usr/bin/env bash
# The AVX-512 kernels' objects may define inline functions and template instances that other objects
# define too (std::min, std::fill, ...): the linker keeps one copy of each, from any object. A copy
# compiled with AVX-512 and chosen for the AVX2 or scalar kernels would crash a CPU without AVX-512.
# So: every weak symbol an AVX-512 object shares with an object of the library compiled without
# AVX-512 must contain no AVX-512 instruction (zmm registers, mask registers, embedded broadcasts).
# Usage: check_isa_isolation.sh "obj1;obj2;..." (the library's objects, as CMake lists them).
set -euo pipefail
IFS=';' read -r -a objects <<< "$1"
avx512=() others=()
for obj in "${objects[@]}"; do
  [ -f "$obj" ] || { echo "missing object: $obj"; exit 1; }
  case "$(basename "$obj")" in kernels_avx512*.o) avx512+=("$obj") ;; *) others+=("$obj") ;; esac
done
[ "${#avx512[@]}" -gt 0 ] || { echo "no AVX-512 kernel objects among the library's"; exit 1; }
elsewhere=$(mktemp)
trap 'rm -f "$elsewhere"' EXIT
nm --defined-only "${others[@]}" 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u > "$elsewhere"
checked=0 failed=0
for obj in "${avx512[@]}"; do
  while read -r _ kind symbol; do
    case "$kind" in W|V|u) ;; *) continue ;; esac
    grep -qxF -- "$symbol" "$elsewhere" || continue  # defined by AVX-512 objects only
    checked=$((checked + 1))
    if objdump -d --no-show-raw-insn --disassemble="$symbol" "$obj" | grep -Eq '%zmm|%k[1-7]|\{1to'; then
      echo "AVX-512 code in a weak symbol $(basename "$obj") shares with code built without AVX-512: $(echo "$symbol" | c++filt)"
      failed=$((failed + 1))
    fi
  done < <(nm --defined-only "$obj")
done
echo "$checked weak symbols the AVX-512 objects share with the rest of the library checked, $failed with AVX-512 code"
[ "$failed" -eq 0 ]
