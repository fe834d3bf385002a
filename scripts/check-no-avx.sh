#!/usr/bin/env bash
# attnkit on a CPU without AVX: the release build's CLI commands and kernel tests run under
# qemu-user's model of an Intel Nehalem (SSE4.2, no AVX), with dispatch left to choose. qemu raises
# SIGILL for any AVX instruction, so a function compiled for AVX2 that the scalar path reaches (see
# src/cpu/target_region.hpp) fails this stage instead of a user's old machine. Then the whole C++ test
# suite once more, natively, with ATTNKIT_TARGET=scalar. Uses build/ (scripts/check.sh builds it first).
# Needs Debian's qemu-user (scripts/install-deps.sh installs it); without it this fails, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin="$root/build/bin/attnkit"
qemu=(qemu-x86_64 -cpu Nehalem)
if ! command -v qemu-x86_64 >/dev/null; then
  echo "check-no-avx: FAILED: qemu-x86_64 is not installed (Debian: apt-get install qemu-user)" >&2
  exit 1
fi
info=$("${qemu[@]}" "$bin" info)
if ! grep -Eq '^target in use: +scalar' <<<"$info"; then
  echo "$info"
  echo "check-no-avx: FAILED: on the emulated Nehalem, dispatch did not choose the scalar target" >&2
  exit 1
fi
echo "  the emulated CPU has no AVX: dispatch chose the scalar target"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 "$root/scripts/small_inputs.py"  # q, k, v, do.npy: small random float32 inputs

failed=0
# Each command with the exit code it must give; an illegal instruction exits 132.
check() {
  local expected=$1
  shift
  local status=0
  "${qemu[@]}" "$@" > out.txt 2>&1 || status=$?
  if [ "$status" -ne "$expected" ]; then
    echo "check-no-avx: '$*' exited $status, expected $expected$([ "$status" -eq 132 ] && echo ' (illegal instruction)')" >&2
    tail -20 out.txt >&2
    failed=1
  else
    echo "  ran: $(basename "$1") ${*:2}"
  fi
}
check 0 "$bin" explain
check 0 "$bin" run --q q.npy --k k.npy --v v.npy --out o.npy --lse l.npy --probs p.npy --causal top-left
check 0 "$bin" run --q q.npy --k k.npy --v v.npy --out o.npy --dtype bf16 --softcap 5 --window 3,0 --dropout 0.1
check 0 "$bin" run --q q.npy --k k.npy --v v.npy --d-out do.npy --dq dq.npy --dk dk.npy --dv dv.npy --dtype f16
check 0 "$bin" heatmap --probs p.npy --out h.png --html h.html
check 0 "$bin" lab precision --lengths 16,64
check 0 "$bin" bench --soak 5 --seed 1 --threads 2
check 1 "$bin" run --q q.npy --k k.npy --v missing.npy --out o.npy
# The fast kernels' own tests on the target dispatch chooses there (scalar): forward, backward,
# decoding, every option in float32; not the thread-count sweeps and the long split-key sweep, which
# take minutes under emulation (they run natively with ATTNKIT_TARGET=scalar below).
check 0 "$root/build/tests/test_cpu" --gtest_filter='FastForward.*:FastBackward.*:Targets.*:'\
'EveryOption/FastOptions.Float32Gaussian/*:EveryOption/FastBackwardOptions.Float32Gaussian/*'\
'-*.ResultsAreBitwiseIdenticalForAnyThreadCount:FastForward.DecodeSplitsKeysAndMergesExactly'
cd "$root"
[ "$failed" -eq 0 ] || exit 1

echo "== every C++ test with ATTNKIT_TARGET=scalar (natively)"
ATTNKIT_TARGET=scalar ctest --test-dir build --output-on-failure -j"$(nproc)"
