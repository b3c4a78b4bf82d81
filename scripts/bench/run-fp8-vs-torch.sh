#!/usr/bin/env bash
# fp8 e4m3 products through the service against torch._scaled_mm on the same GPU: starts the
# bundled matserve on loopback (CUDA backend), runs scripts/bench/fp8_vs_torch.py against it (every
# operand order, resident e4m3 operands, bf16 results; device time on both sides), and stops the
# server. Writes fp8.{json,md} and server.log to $OUT (default /tmp/matserve-fp8); prints the
# table. Needs PyTorch with CUDA on the machine.
#
# usage: scripts/bench/run-fp8-vs-torch.sh [BUNDLE_DIR] [SCRIPT ARGS...]   (default build/device)
#   e.g. scripts/bench/run-fp8-vs-torch.sh build/device --sizes 2048,8192 --reps 30
# Environment: PYTHON [python3], SERVER (another server executable taking matserve's flags, e.g.
#   an older build to compare), SERVER_ARGS (extra server flags), GATE_LAUNCHES [1] (the server
#   runs with --gate_launches, so its kernel_us is device time only, as torch's is; 0: not, as a
#   SERVER built before that flag needs).
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
bundle=build/device
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then bundle=$1; shift; fi
out=${OUT:-/tmp/matserve-fp8}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
"$bundle/with-env.sh" true || exit 1
# shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
gate=()
[ "${GATE_LAUNCHES:-1}" = 0 ] || gate=(--gate_launches)
${SERVER:-"$bundle/with-env.sh" matserve} --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend=cuda \
  "${gate[@]}" ${SERVER_ARGS:-} >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-fp8-vs-torch 300) || exit 1
PYTHONPATH="$bundle/python:$here/../../client/python${PYTHONPATH:+:$PYTHONPATH}" \
  "${PYTHON:-python3}" "$here/fp8_vs_torch.py" --target "127.0.0.1:$port" --out "$out" "$@"
rc=$?
kill -TERM $server
wait $server || rc=1
exit $rc
