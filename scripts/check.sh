#!/usr/bin/env bash
# Builds and runs every test twice: an optimised build with warnings as errors (then its CLI's main
# commands under valgrind's memcheck; the CLI and the kernel tests on an emulated CPU without AVX,
# and every test again with ATTNKIT_TARGET=scalar (scripts/check-no-avx.sh); a 30-second soak run),
# then a debug build under AddressSanitizer + UndefinedBehaviorSanitizer (then a 20-second soak under
# them); then the fuzz targets under libFuzzer for ATTNKIT_FUZZ_SECONDS each (scripts/check-fuzz.sh,
# clang-14); then the multi-threaded tests a third time, under ThreadSanitizer; last, the Python package's tests
# (scripts/check-python.sh: pip install . into a virtual environment, then pytest); and the
# documentation: Doxygen over the public headers, warnings as errors (scripts/check-api-docs.sh), and
# every example of README.md and docs/ built or run, its shown output compared, its links, paths and
# flags checked (scripts/check-docs.py). This is the README's test command and CI's.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# Each stage's heading says how far into the run it starts (bash's SECONDS), so that CI's log shows
# which stage takes the time.
stage() { echo "== $1 (at ${SECONDS} s)"; }

stage "release build, warnings are errors"
# attnkit::dist is asked for, not left to whether MPI happens to be found: without MPI this fails.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DATTNKIT_WERROR=ON -DATTNKIT_BUILD_MPI=ON
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

stage "API reference: Doxygen over include/attnkit, every public symbol documented"
bash scripts/check-api-docs.sh build/doxygen

stage "valgrind memcheck on the CLI's main commands (the release build's binary)"
bash scripts/check-valgrind.sh

stage "a CPU without AVX: the CLI and the kernel tests under qemu's Nehalem, then every test with ATTNKIT_TARGET=scalar"
bash scripts/check-no-avx.sh

stage "soak: random calls checked against the reference, memory flat (the release build's binary)"
./build/bin/attnkit bench --soak "${ATTNKIT_SOAK_SECONDS:-30}" --threads "$jobs"

stage "AddressSanitizer + UndefinedBehaviorSanitizer build"
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DATTNKIT_SANITIZE=ON -DATTNKIT_WERROR=ON -DATTNKIT_BUILD_MPI=ON
cmake --build build-sanitize -j"$jobs"
ctest --test-dir build-sanitize --output-on-failure -j"$jobs"

stage "soak under AddressSanitizer + UndefinedBehaviorSanitizer"
./build-sanitize/bin/attnkit bench --soak "${ATTNKIT_SANITIZED_SOAK_SECONDS:-20}" --threads "$jobs"

# 30 s a target here keeps the test command's time in check; scripts/check-fuzz.sh alone defaults to 60.
export ATTNKIT_FUZZ_SECONDS="${ATTNKIT_FUZZ_SECONDS:-30}"
stage "libFuzzer: each fuzz target for ${ATTNKIT_FUZZ_SECONDS}s (clang-14, ASan + UBSan)"
bash scripts/check-fuzz.sh

stage "ThreadSanitizer build: the thread pool, the thread-count tests of the kernels and the module, concurrent calls from user threads, and calls that run out of memory"
# GCC 12's TSan runtime aborts with "unexpected memory mapping" on kernels that randomise mmap with
# more bits than it expects (vm.mmap_rnd_bits > 28). Without address randomisation it always works, so
# the build (whose test discovery runs the binaries) and the tests run under `setarch -R` wherever
# the system allows it; some container seccomp profiles refuse that personality, and there it runs
# without it.
no_aslr=()
if setarch "$(uname -m)" -R true 2>/dev/null; then no_aslr=(setarch "$(uname -m)" -R); fi
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNKIT_TSAN=ON -DATTNKIT_WERROR=ON
"${no_aslr[@]}" cmake --build build-tsan -j"$jobs" --target test_core test_reference test_cpu test_mha test_kv_cache test_concurrency \
  test_allocation_failure
"${no_aslr[@]}" ctest --test-dir build-tsan --output-on-failure --no-tests=error -j"$jobs" -R 'ThreadPool|ThreadCount|AttendDeterminism|ConcurrentCalls|AllocationFailure'

stage "Python package: pip install . into build-python/venv, then pytest"
bash scripts/check-python.sh

stage "documentation: every example in README.md and docs/ built, run and compared; links, paths, flags"
python3 scripts/check-docs.py --build build --python build-python/venv/bin/python --self-test
python3 scripts/check-docs.py --build build --python build-python/venv/bin/python
echo "== every check passed in ${SECONDS} s"
