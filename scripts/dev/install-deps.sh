#!/usr/bin/env bash
# Installs what matserve needs to build, run and test from the distribution's packages (Debian 12,
# Ubuntu 24.04), skipping what is already there. Uses sudo when not root. The CUDA toolkit is not
# installed here: when /usr/local/cuda exists the build uses it, otherwise it builds CPU-only.
# The Dockerfile runs this same script, with MATSERVE_TEST_DEPS=0: packages only the tests use
# (test_packages) are then left out.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl openssl clang
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev libssl-dev
  prometheus-cpp-dev libcpp-httplib-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-dev python3-grpcio python3-protobuf python3-numpy python3-matplotlib python3-yaml
  python3-pip python3-setuptools python3-wheel
  prometheus
)
# Only the tests use these. python3-torch: the Python client's torch-tensor operands
# (tests/e2e/test_python_interop.py, which skips without it); about 50 MB to download and 1 GB
# installed with its libraries, under two minutes on two cores.
test_packages=(python3-torch)
if [ "${MATSERVE_TEST_DEPS:-1}" != 0 ]; then packages+=("${test_packages[@]}"); fi

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
