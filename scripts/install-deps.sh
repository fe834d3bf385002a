#!/usr/bin/env bash
# Installs what attnkit needs to build and test on Debian 12, from Debian's archive. Run as root.
set -euo pipefail
packages=(
  g++ cmake make              # C++20 compiler and build
  libgtest-dev libgmock-dev  # GoogleTest, for the tests
  libopenblas-dev pkg-config # OpenBLAS: the module's projections and the bench's baseline
  nlohmann-json3-dev         # JSON: the tool's --json lines
  libcli11-dev               # CLI11: the tool's flags and --help
  python3-venv python3-dev   # the Python package: a virtual environment (with pip), and Python.h
  libcairo2-dev libfontconfig-dev fonts-dejavu-core  # the tool's pictures (PNG, SVG, PDF), finding its font, the font
  libopenmpi-dev openmpi-bin # attnkit::dist (ring attention over MPI) and its tests under mpirun
  valgrind                   # the CLI's main commands under memcheck (scripts/check-valgrind.sh)
  qemu-user                  # a CPU without AVX for the CLI and kernel tests (scripts/check-no-avx.sh)
  clang-14 libclang-rt-14-dev  # libFuzzer and the sanitizers' runtimes (scripts/check-fuzz.sh)
  libjemalloc2               # the allocator torch is benchmarked with (python -m attnkit.bench)
  doxygen                    # the API reference from the headers (scripts/check-api-docs.sh)
)
# ATTNKIT_INSTALL_BROWSER=1 (CI) adds Chromium, for the test that loads `attnkit heatmap --html`'s
# page in a headless browser; without it that test skips, saying why.
if [ "${ATTNKIT_INSTALL_BROWSER:-0}" = 1 ]; then packages+=(chromium); fi
if [ "$(id -u)" -ne 0 ]; then
  # Without root nothing can be installed: check instead, and fail naming what is missing.
  missing=()
  for package in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)
    if [ "$status" != installed ]; then missing+=("$package"); fi
  done
  if [ "${#missing[@]}" -ne 0 ]; then
    echo "install-deps: not root, so nothing was installed; missing: ${missing[*]}" >&2
    echo "install-deps: run as root (it uses apt-get), or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: not root, and every package is already installed"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}"
