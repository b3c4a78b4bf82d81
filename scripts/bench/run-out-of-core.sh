#!/usr/bin/env bash
# Products larger than the device's budget, computed out of core: starts the bundled matserve on
# loopback (CUDA backend, one GPU, a 16 GiB device budget, pinned host memory for the matrices
# too large for it), runs scripts/bench/out_of_core.py against it (each product out of core and
# the largest of its dtype that fits in core, results checked on sampled entries), and stops the
# server. Writes out-of-core.{json,md} and server.log to $OUT (default /tmp/matserve-out-of-core);
# prints the table. Needs about 3 x 16 GiB of host memory for the fp32 case, and as much again
# free for the client's operands.
#
# usage: scripts/bench/run-out-of-core.sh [BUNDLE_DIR] [SCRIPT ARGS...]   (default build/device)
#   e.g. scripts/bench/run-out-of-core.sh build/device --cases bf16:65536:49152 --reps 3
# Environment: PYTHON [python3], BUDGET [17179869184], HOST_BYTES [55834574848],
# SERVER_ARGS (extra server flags, e.g. --out_of_core_tile=4096).
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
bundle=build/device
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then bundle=$1; shift; fi
out=${OUT:-/tmp/matserve-out-of-core}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
"$bundle/with-env.sh" true || exit 1
# shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
"$bundle/with-env.sh" matserve --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend=cuda \
  --devices=0 --memory_budget_bytes="${BUDGET:-17179869184}" \
  --max_host_matrix_bytes="${HOST_BYTES:-55834574848}" ${SERVER_ARGS:-} >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-out-of-core 300) || exit 1
PYTHONPATH="$bundle/python:$here/../../client/python${PYTHONPATH:+:$PYTHONPATH}" \
  "${PYTHON:-python3}" "$here/out_of_core.py" --target "127.0.0.1:$port" --out "$out" "$@"
rc=$?
kill -TERM $server
wait $server || rc=1
exit $rc
