#!/usr/bin/env bash
# Quick start, step 1: installs what is missing, builds, and runs the server in the foreground
# (CUDA backend on a GPU machine, CPU backend otherwise). Flags are passed to `matserve`.
# In another terminal:  build/client/matserve-cli --target localhost:50051 multiply --random 512x256x128 --verify
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/dev/install-deps.sh
scripts/dev/build.sh
exec "${BUILD_DIR:-build}/server/matserve" "$@"
