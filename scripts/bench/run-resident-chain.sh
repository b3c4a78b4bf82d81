#!/usr/bin/env bash
# A chain of resident products (resident_chain.py: x <- x @ w, each result kept on the server)
# with the step before let go of three ways: its own Release call, named in the next call's
# release_handles, or held to the end. Starts the bundled matserve on loopback (CUDA backend, one
# GPU), runs the chain ROUNDS times against it, and stops it.
# Writes chain.md (every round's table), chain-ROUND.json and server.log to $OUT (default
# /tmp/matserve-resident-chain).
#
# usage: scripts/bench/run-resident-chain.sh [BUNDLE_DIR] [resident_chain.py ARGS...]
#   (default build/device). Without a bundle (e.g. a CPU build):
#   MATSERVE_BACKEND=cpu MATSERVE_SERVER=build/server/matserve MATSERVE_PYTHON_STUBS=build/python
# Environment: MATSERVE_BACKEND [cuda], PYTHON [python3], SERVER_ARGS (extra server flags),
#   ROUNDS [3].
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
# shellcheck source=../lib/python-client.sh
source "$(dirname "$0")/../lib/python-client.sh"
bundle=build/device
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then bundle=$1; shift; fi
out=${OUT:-/tmp/matserve-resident-chain}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
resolve_python_client "$bundle" || exit 1
# shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
"${server_cmd[@]}" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --backend="${MATSERVE_BACKEND:-cuda}" ${SERVER_ARGS:-} >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-resident-chain 300) || exit 1
rc=0
: >"$out/chain.md"
for ((round = 1; round <= ${ROUNDS:-3}; round++)); do
  echo "round $round" | tee -a "$out/chain.md"
  PYTHONPATH="$stubs:$here/../../client/python${PYTHONPATH:+:$PYTHONPATH}" "${client_env[@]}" \
    "${PYTHON:-python3}" "$here/resident_chain.py" "127.0.0.1:$port" \
    --json "$out/chain-$round.json" "$@" | tee -a "$out/chain.md"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
kill -TERM $server
wait $server || rc=1
exit $rc
