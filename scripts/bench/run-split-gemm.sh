#!/usr/bin/env bash
# One product spread over every GPU of a node: starts the bundled matserve on loopback (CUDA
# backend, every visible GPU), runs scripts/bench/split_gemm.py against it (each case on one GPU
# and split over all, resident operands and result, results checked), and stops the server.
# Writes split-gemm.{json,md}, nvidia-smi's topology and server.log to $OUT (default
# /tmp/matserve-split-gemm); prints the table.
#
# usage: scripts/bench/run-split-gemm.sh [BUNDLE_DIR] [SCRIPT ARGS...]   (default build/device)
#   e.g. scripts/bench/run-split-gemm.sh build/device --cases bf16:32768,fp64:16384 --reps 5
# Environment: PYTHON [python3], SERVER_ARGS (extra server flags, e.g. --split_gemm_tile=8192).
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
bundle=build/device
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then bundle=$1; shift; fi
out=${OUT:-/tmp/matserve-split-gemm}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
"$bundle/with-env.sh" true || exit 1
nvidia-smi topo -m >"$out/topology.txt" 2>&1
# shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
"$bundle/with-env.sh" matserve --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend=cuda \
  ${SERVER_ARGS:-} >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-split-gemm 300) || exit 1
PYTHONPATH="$bundle/python:$here/../../client/python${PYTHONPATH:+:$PYTHONPATH}" \
  "${PYTHON:-python3}" "$here/split_gemm.py" --target "127.0.0.1:$port" --out "$out" "$@"
rc=$?
kill -TERM $server
wait $server || rc=1
exit $rc
