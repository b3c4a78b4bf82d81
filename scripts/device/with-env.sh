#!/usr/bin/env bash
# On the GPU machine: unpacks the bundle beside this script (once) and runs a command with the
# bundle's bin/ on PATH and its lib/ plus the machine's CUDA libraries on LD_LIBRARY_PATH.
# usage: build/device/with-env.sh COMMAND [ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${MATSERVE_DEVICE_DIR:-/tmp/matserve-device}
if [ ! -f "$dest/.unpacked" ] || [ "$here/bundle.tar.xz" -nt "$dest/.unpacked" ]; then
  rm -rf "$dest" && mkdir -p "$dest"
  tar -C "$dest" -xJf "$here/bundle.tar.xz"
  touch "$dest/.unpacked"
fi
export PATH="$dest/bin:$PATH"
export LD_LIBRARY_PATH="$dest/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$@"
