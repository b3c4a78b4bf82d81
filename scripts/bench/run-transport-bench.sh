#!/usr/bin/env bash
# Transports through the Python client: starts the bundled matserve on loopback (CUDA backend),
# runs scripts/bench/transport_latency.py against it (inline bytes, striped ranges over 1, 2, 4, 8
# and 16 connections, a shared-memory region, GPU tensors by CUDA IPC, and PyTorch locally from
# the same host arrays; PyTorch with CUDA for the last two), and stops the server. Writes
# transport.{json,md} and server.log to $OUT (default /tmp/matserve-transport); prints the table.
#
# usage: scripts/bench/run-transport-bench.sh [BUNDLE_DIR] [SCRIPT ARGS...]   (default build/device)
#   e.g. scripts/bench/run-transport-bench.sh build/device --shapes 1024,4096 --reps 30
#   a CPU build: MATSERVE_BACKEND=cpu MATSERVE_SERVER=build-cpu/server/matserve \
#     MATSERVE_PYTHON_STUBS=build-cpu/python scripts/bench/run-transport-bench.sh \
#     --shapes 256,512 --transports inline,striped,shm --reps 5
# Environment: MATSERVE_BACKEND [cuda], PYTHON [python3], SERVER_ARGS (extra server flags).
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
bundle=build/device
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then bundle=$1; shift; fi
out=${OUT:-/tmp/matserve-transport}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$bundle/with-env.sh" ] && [ -z "${MATSERVE_SERVER:-}" ]; then
  "$bundle/with-env.sh" true || exit 1
  server_cmd=("$bundle/with-env.sh" matserve)
  stubs=${MATSERVE_PYTHON_STUBS:-$bundle/python}
else
  : "${MATSERVE_SERVER:?no bundle at $bundle: set MATSERVE_SERVER (and MATSERVE_PYTHON_STUBS)}"
  server_cmd=("$MATSERVE_SERVER")
  stubs=${MATSERVE_PYTHON_STUBS:?set MATSERVE_PYTHON_STUBS to <build>/python}
fi
# shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
"${server_cmd[@]}" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --backend="${MATSERVE_BACKEND:-cuda}" ${SERVER_ARGS:-} >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-transport-bench 300) || exit 1
PYTHONPATH="$stubs:$here/../../client/python${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" \
  "$here/transport_latency.py" --target "127.0.0.1:$port" --out "$out" "$@"
rc=$?
kill -TERM $server
wait $server || rc=1
exit $rc
