#!/usr/bin/env bash
# Where a small call's round trip goes: starts the bundled matserve on loopback (CUDA backend, one
# GPU), runs matserve-bench at concurrency 1 with a bare health check (ping: the gRPC round trip
# with no matrix work, answered on gRPC's callback threads), an echo (a ListResident call: the
# same client and transport, on the synchronous server threads Multiply runs on) and a resident
# multiply of the shape (default 256^3 fp32; result kept and released between calls, outside
# the timed call), and stops the server. The report gives each run's client p50 and the server's
# own total.
# Writes small-call.{txt,json} and server.log to $OUT (default /tmp/matserve-small-call).
#
# usage: scripts/bench/run-small-call.sh [BUNDLE_DIR] [MATSERVE-BENCH ARGS...]  (default build/device)
# Environment: MATSERVE_BACKEND [cuda], SERVER_ARGS (extra server flags), SHAPES [256],
#   COMPUTE [fp32], DURATION [5] (seconds per run).
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
bundle=build/device
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then bundle=$1; shift; fi
out=${OUT:-/tmp/matserve-small-call}
mkdir -p "$out"
if [ -x "$bundle/with-env.sh" ] && [ -z "${MATSERVE_SERVER:-}" ]; then
  "$bundle/with-env.sh" true || exit 1
  server_cmd=("$bundle/with-env.sh" matserve)
  bench_cmd=("$bundle/with-env.sh" matserve-bench)
else
  : "${MATSERVE_SERVER:?no bundle at $bundle: set MATSERVE_SERVER and MATSERVE_BENCH}"
  server_cmd=("$MATSERVE_SERVER")
  bench_cmd=("${MATSERVE_BENCH:?set MATSERVE_BENCH to the matserve-bench binary}")
fi
# shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
"${server_cmd[@]}" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --backend="${MATSERVE_BACKEND:-cuda}" ${SERVER_ARGS:-} >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-small-call 300) || exit 1
"${bench_cmd[@]}" --target "127.0.0.1:$port" --modes ping,echo,resident --shapes "${SHAPES:-256}" \
  --compute "${COMPUTE:-fp32}" --concurrency 1 --duration "${DURATION:-5}" --warmup 50 \
  --release inline --json "$out/small-call.json" "$@" 2>&1 | tee "$out/small-call.txt"
rc=${PIPESTATUS[0]}
kill -TERM $server
wait $server || rc=1
exit $rc
