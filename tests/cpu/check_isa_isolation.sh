#!/usr/bin/env bash
# The AVX-512 kernels' objects may define inline functions and template instances that other objects
# define too (std::min, std::fill, ...): the linker keeps one copy of each, from any object. A copy
# compiled with AVX-512 and chosen for the AVX2 or scalar kernels would crash a CPU without AVX-512.
# So: every weak symbol an AVX-512 object defines outside its own target namespace must contain no
# AVX-512 instruction (zmm registers, mask registers, embedded broadcasts).
# Usage: check_isa_isolation.sh "obj1;obj2;..." (the library's objects, as CMake lists them).
set -euo pipefail
IFS=';' read -r -a objects <<< "$1"
checked=0 failed=0
for obj in "${objects[@]}"; do
  case "$(basename "$obj")" in kernels_avx512*.o) ;; *) continue ;; esac
  [ -f "$obj" ] || { echo "missing object: $obj"; exit 1; }
  while read -r _ kind symbol; do
    case "$kind" in W|V|u) ;; *) continue ;; esac
    name=$(echo "$symbol" | c++filt)
    case "$name" in *avx512_target::*|*avx512_bf16_target::*) continue ;; esac
    checked=$((checked + 1))
    if objdump -d --no-show-raw-insn --disassemble="$symbol" "$obj" | grep -Eq '%zmm|%k[1-7]|\{1to'; then
      echo "AVX-512 code in a shared weak symbol of $(basename "$obj"): $name"
      failed=$((failed + 1))
    fi
  done < <(nm --defined-only "$obj")
done
echo "$checked shared weak symbols of the AVX-512 objects checked, $failed with AVX-512 code"
[ "$failed" -eq 0 ]
