#!/usr/bin/env bash
# Quick start, step 2 (and CI): installs what is missing, builds everything, and runs the whole
# test suite with ctest. GPU tests skip themselves (visibly) where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/dev/install-deps.sh
scripts/dev/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 900
