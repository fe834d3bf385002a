#!/usr/bin/env bash
# Builds and runs every test twice: an optimised build with warnings as errors, then a debug build
# under AddressSanitizer + UndefinedBehaviorSanitizer. This is the README's test command and CI's.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== release build, warnings are errors"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DATTNKIT_WERROR=ON
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build"
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DATTNKIT_SANITIZE=ON -DATTNKIT_WERROR=ON
cmake --build build-sanitize -j"$jobs"
ctest --test-dir build-sanitize --output-on-failure -j"$jobs"
