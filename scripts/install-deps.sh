#!/usr/bin/env bash
# Installs what matserve needs to build, run and test from the distribution's packages (Debian 12,
# Ubuntu 24.04), skipping what is already there. Uses sudo when not root. The CUDA toolkit is not
# installed here: when /usr/local/cuda exists the build uses it, otherwise it builds CPU-only.
# The Dockerfile runs this same script.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl openssl clang
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev libssl-dev
  prometheus-cpp-dev libcpp-httplib-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-grpcio python3-protobuf python3-numpy python3-matplotlib python3-yaml
  python3-pip python3-setuptools python3-wheel
  prometheus
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: everything is installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
