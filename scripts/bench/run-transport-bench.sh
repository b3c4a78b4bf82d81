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
# Environment: MATSERVE_BACKEND [cuda], PYTHON [python3], SERVER_ARGS (extra server flags),
#   ROUNDS [1] (runs of the script against the one server; round N writes to $OUT/roundN when
#   ROUNDS > 1), OTHER_CLIENT (a directory holding another matserve_client package, e.g. a
#   checkout of an earlier commit's client/python: each round then also runs the script with
#   that client, right after this tree's, into the same directory with "-other" appended;
#   compare within a round), OTHER_STUBS (with OTHER_CLIENT: the other run's stubs folder, e.g.
#   an earlier build's build/python with its compiled data plane; default: this bundle's).
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
# shellcheck source=../lib/python-client.sh
source "$(dirname "$0")/../lib/python-client.sh"
bundle=build/device
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then bundle=$1; shift; fi
out=${OUT:-/tmp/matserve-transport}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
resolve_python_client "$bundle" || exit 1
# shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
"${server_cmd[@]}" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --backend="${MATSERVE_BACKEND:-cuda}" ${SERVER_ARGS:-} >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-transport-bench 300) || exit 1
rounds=${ROUNDS:-1}
rc=0
run_client() {  # stubs directory, client directory, output directory, script args
  local stubs=$1 client=$2 dir=$3
  shift 3
  mkdir -p "$dir"
  PYTHONPATH="$stubs:$client${PYTHONPATH:+:$PYTHONPATH}" "${client_env[@]}" "${PYTHON:-python3}" \
    "$here/transport_latency.py" --target "127.0.0.1:$port" --out "$dir" "$@" || rc=1
}
for ((round = 1; round <= rounds; round++)); do
  dir=$out
  [ "$rounds" -gt 1 ] && dir="$out/round$round"
  [ "$rounds" -gt 1 ] && echo "== round $round: this tree's client"
  run_client "$stubs" "$here/../../client/python" "$dir" "$@"
  if [ -n "${OTHER_CLIENT:-}" ]; then
    echo "== round $round: the client in $OTHER_CLIENT${OTHER_STUBS:+ with the stubs in $OTHER_STUBS}"
    run_client "${OTHER_STUBS:-$stubs}" "$OTHER_CLIENT" "$dir-other" "$@"
  fi
done
kill -TERM $server
wait $server || rc=1
exit $rc
