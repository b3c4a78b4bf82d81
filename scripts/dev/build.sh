#!/usr/bin/env bash
# Configures and builds matserve into BUILD_DIR (default: build). CUDA is used when the toolkit is
# at /usr/local/cuda (or CUDACXX names nvcc); MATSERVE_CUDA=OFF forces a CPU-only build.
# Extra arguments go to the cmake configure step.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DMATSERVE_CUDA="${MATSERVE_CUDA:-AUTO}" "$@"
cmake --build "$build" -j "$jobs"
