#!/usr/bin/env bash
# Fuzzes attnkit with libFuzzer: builds the targets of fuzz/ with clang-14 (coverage, AddressSanitizer
# and UndefinedBehaviorSanitizer) in build-fuzz, then runs each for ATTNKIT_FUZZ_SECONDS seconds
# (default 60), two at a time, starting from a scratch copy of its seed corpus and saved findings (so
# the repository's corpus is never modified) and the dictionary of fuzz/dict/.
#
# Exits non-zero on any finding (crash, sanitizer report, timeout, memory limit), after printing the
# sanitizer's report, the input's path and the input itself in base64 and as a hexdump: the CI log is
# enough to add it to fuzz/regressions/<target>/, where every build's tests replay it.
#
# Without clang-14 or its fuzzer runtime (Debian: clang-14 libclang-rt-14-dev, see
# scripts/install-deps.sh) this fails, saying so, unless ATTNKIT_SKIP_FUZZ=1, which skips it instead.
#
#   ATTNKIT_FUZZ_SECONDS=600 bash scripts/check-fuzz.sh                  # longer
#   build-fuzz/fuzz/fuzz_npy -max_total_time=3600 scratch/ fuzz/corpus/npy   # one target, by hand
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${ATTNKIT_FUZZ_SECONDS:-60}
build=${ATTNKIT_FUZZ_BUILD_DIR:-build-fuzz}
parallel=${ATTNKIT_FUZZ_JOBS:-2}  # fuzzers running at once; each uses one core
cxx=clang++-14

unavailable() {
  if [ "${ATTNKIT_SKIP_FUZZ:-0}" = 1 ]; then
    echo "check-fuzz: skipped (ATTNKIT_SKIP_FUZZ=1): $1"
    exit 0
  fi
  echo "check-fuzz: FAILED: $1." >&2
  echo "check-fuzz: install clang-14 and libclang-rt-14-dev (scripts/install-deps.sh does), or set ATTNKIT_SKIP_FUZZ=1 to skip fuzzing" >&2
  exit 1
}

command -v "$cxx" >/dev/null 2>&1 || unavailable "$cxx is not installed"
# The cheapest complete test of the toolchain: link an empty fuzz target with both sanitizers.
probe_dir=$(mktemp -d)
scratch=$(mktemp -d)
trap 'rm -rf "$probe_dir" "$scratch"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe_dir/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cpp" -o "$probe_dir/probe" 2> "$probe_dir/log"; then
  cat "$probe_dir/log" >&2
  unavailable "$cxx cannot link a libFuzzer program (is the fuzzer runtime, libclang-rt-14-dev, installed?)"
fi

targets=()
for source in fuzz/fuzz_*.cpp; do
  name=$(basename "$source" .cpp)
  targets+=("${name#fuzz_}")
done
# Every target starts from its seed corpus: one that is missing or empty is an error, not a fuzzer
# left to start from nothing.
for name in "${targets[@]}"; do
  seeds=(fuzz/corpus/"$name"/*)
  if [ ! -e "${seeds[0]}" ]; then
    echo "check-fuzz: FAILED: no seed corpus for $name (fuzz/corpus/$name/ is missing or empty)" >&2
    exit 1
  fi
done

echo "check-fuzz: building ${targets[*]} in $build"
CC=clang-14 CXX="$cxx" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
  -DATTNKIT_FUZZ=ON -DATTNKIT_WERROR=ON -DATTNKIT_BUILD_TOOLS=ON -DATTNKIT_BUILD_TESTS=OFF \
  -DATTNKIT_BUILD_EXAMPLES=OFF -DATTNKIT_BUILD_MPI=OFF -DATTNKIT_BUILD_PYTHON=OFF > "$scratch/configure.log" ||
  { cat "$scratch/configure.log" >&2; exit 1; }
cmake --build "$build" -j"$parallel" --target "${targets[@]/#/fuzz_}"

findings="$build/fuzz-findings"  # kept after the run, so that the paths printed below exist
rm -rf "$findings"
# UBSan stops at its first report (the build uses -fno-sanitize-recover) with a stack trace.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# Runs one target; its log and exit status go to the scratch directory.
fuzz_one() {
  local name=$1 corpus="$scratch/$1/corpus" dict="fuzz/dict/$1.dict"
  mkdir -p "$corpus" "$findings/$name"
  local inputs
  shopt -s nullglob  # fuzz/regressions/<target>/ exists only once something was caught
  inputs=(fuzz/corpus/"$name"/* fuzz/regressions/"$name"/*)
  shopt -u nullglob
  if ! cp "${inputs[@]}" "$corpus"/ 2> "$scratch/$name.log"; then  # a failed copy is a failed run
    echo 1 > "$scratch/$name.status"
    return
  fi
  local options=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
                 -artifact_prefix="$findings/$name/")
  if [ -f "$dict" ]; then options+=(-dict="$dict"); fi
  local status=0
  "$build/fuzz/fuzz_$name" "${options[@]}" "$corpus" > "$scratch/$name.log" 2>&1 || status=$?
  echo "$status" > "$scratch/$name.status"
}

echo "check-fuzz: running each target for ${seconds}s, $parallel at a time"
for name in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  fuzz_one "$name" &
done
wait

failed=0
for name in "${targets[@]}"; do
  status=$(cat "$scratch/$name.status")
  # libFuzzer's final lines: "Done N runs in S second(s)" and the stat:: figures.
  summary=$(grep -E '^#[0-9]+.*(DONE|cov:)' "$scratch/$name.log" | tail -1 || true)
  runs=$(grep -E '^stat::number_of_executed_units' "$scratch/$name.log" | awk '{print $2}' || true)
  echo "check-fuzz: $name: exit $status, ${runs:-?} runs; ${summary:-no coverage line}"
  artifacts=("$findings/$name"/*)
  if [ "$status" -ne 0 ] || [ -e "${artifacts[0]}" ]; then
    failed=1
    echo "check-fuzz: FINDING in $name; the fuzzer's log ends with:"
    tail -n 80 "$scratch/$name.log"
    for artifact in "${artifacts[@]}"; do
      [ -e "$artifact" ] || continue
      echo "check-fuzz: input $artifact ($(stat -c %s "$artifact") bytes); to keep it as a regression test:"
      echo "  base64 -d > fuzz/regressions/$name/<what-it-caught> <<'EOF'"
      base64 -w 76 "$artifact"
      echo "EOF"
      od -A x -t x1z -v "$artifact" | head -n 64  # coreutils, unlike hexdump
    done
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "check-fuzz: FAILED: see the findings above; rerun one with $build/fuzz/fuzz_<target> <input>" >&2
  exit 1
fi
echo "check-fuzz: no finding in ${targets[*]} (${seconds}s each)"
