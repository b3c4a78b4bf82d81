#!/usr/bin/env bash
# Packs built matserve binaries and the non-system shared libraries they need into one compressed
# bundle, build/device/bundle.tar.xz, for a GPU machine that has the NVIDIA driver and CUDA but no
# build tools or gRPC/Abseil/protobuf/OpenBLAS. Beside it: with-env.sh (unpacks once, runs a
# command with the bundle's libraries) and run-gpu-checks.sh (runs every GPU test, prints a summary).
#
# usage: scripts/device/bundle.sh [BUILD_DIR] [BINARY...]
#   default BUILD_DIR: build; default binaries: matserve, matserve-cli, matserve-bench, every
#   *_test and *_bench.
# docs/device.md explains the workflow.
set -euo pipefail

build=${1:-build}
shift || true
out="$build/device"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$out"

if [ $# -gt 0 ]; then
  bins=("$@")
else
  mapfile -t bins < <(find "$build" -path "$out" -prune -o -type f -executable \
    \( -name matserve -o -name matserve-cli -o -name matserve-bench -o -name '*_test' -o -name '*_bench' \) -print | sort)
fi
[ ${#bins[@]} -gt 0 ] || { echo "device-bundle: no binaries found under $build" >&2; exit 1; }

# Libraries the device machine has itself (system C/C++ runtime, CUDA, the driver): never carried.
system_lib='^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^ ]*|linux-vdso|libcuda|libcudart|libcublas|libcublasLt|libnvidia-ml|libnvrtc)\.so'

carry_libraries() {  # the non-system shared libraries $1 needs, into lib/
  ldd "$1" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if [[ ! "$name" =~ $system_lib ]] && [ ! -e "$stage/lib/$name" ]; then
      cp -L "$path" "$stage/lib/$name"
    fi
  done
}
for bin in "${bins[@]}"; do
  cp "$bin" "$stage/bin/"
  strip --strip-debug "$stage/bin/$(basename "$bin")" 2>/dev/null || true
  carry_libraries "$bin"
done
# The Python client's compiled data plane (in the stubs' folder, carried below) needs them too.
for module in "$build"/python/*.so; do
  [ -e "$module" ] && carry_libraries "$module"
done
strip --strip-debug "$stage"/lib/*.so* 2>/dev/null || true

tar -C "$stage" -cJf "$out/bundle.tar.xz" bin lib
here=$(cd "$(dirname "$0")" && pwd)
# Python stubs for the end-to-end tests and the Python client, with the client's compiled data
# plane (matserve_native, loaded with the bundle's libraries: run Python through with-env.sh).
if [ -d "$build/python" ]; then
  rm -rf "$out/python" && cp -r "$build/python" "$out/python"
  strip --strip-debug "$out"/python/*.so 2>/dev/null || true
fi
cp "$here/with-env.sh" "$here/run-gpu-checks.sh" "$here/run-gpu-mutants.sh" "$out/"
chmod +x "$out"/*.sh
echo "device-bundle: $(ls "$stage/bin" | wc -l) binaries, $(ls "$stage/lib" | wc -l) libraries," \
     "$(du -h "$out/bundle.tar.xz" | cut -f1) compressed in $out/bundle.tar.xz"
