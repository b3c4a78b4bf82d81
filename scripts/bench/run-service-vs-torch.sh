#!/usr/bin/env bash
# The service against torch.matmul on the same GPU: starts the bundled matserve on loopback (CUDA
# backend, one GPU), waits for its port, runs scripts/bench/service_vs_torch.py against it (torch in
# the same process on the same GPU), stops the server, and plots the ratios when matplotlib is
# there. Writes service_vs_torch.{json,md}, run.log, server.log (and service_vs_torch.{png,svg}) to
# $OUT (default /tmp/matserve-service-vs-torch); prints the Markdown report last.
#
# usage: scripts/bench/run-service-vs-torch.sh [BUNDLE_DIR] [SCRIPT ARGS...]   (default build/device)
#   e.g. scripts/bench/run-service-vs-torch.sh build/device --quick
#   BUNDLE_DIR comes from scripts/device/bundle.sh (it must hold matserve; its python/ holds the
#   generated stubs). Without a bundle, set MATSERVE_SERVER to the binary and MATSERVE_PYTHON_STUBS
#   to <build>/python (e.g. a CPU build with MATSERVE_BACKEND=cpu; the baseline is then NumPy).
# Environment (defaults in brackets): MATSERVE_BACKEND [cuda], GPU [0] (the ordinal the server is
#   given and torch uses), PYTHON [python3] (must have numpy, grpcio, protobuf, and torch for a GPU
#   comparison), SERVER_ARGS (extra server flags; on CUDA --memory_budget_bytes=32 GiB is added
#   unless they name a budget, leaving the rest of the GPU to torch), GATE_LAUNCHES [1] (on CUDA
#   the server runs with --gate_launches, so its kernel_us is device time only, as torch's is
#   with its stream held busy; 0: the server's default, whose kernel_us may hold a wait for the
#   host's enqueue, and what a server built before --gate_launches needs).
# Exit status: the Python script's (1 on a correctness failure), or 1 if the server failed.
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
bundle=build/device
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then bundle=$1; shift; fi
out=${OUT:-/tmp/matserve-service-vs-torch}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
backend=${MATSERVE_BACKEND:-cuda}
gpu=${GPU:-0}
python=${PYTHON:-python3}

if [ -x "$bundle/with-env.sh" ] && [ -z "${MATSERVE_SERVER:-}" ]; then
  # Unpacks once, before the server starts.
  if ! "$bundle/with-env.sh" sh -c 'command -v matserve' >/dev/null; then
    echo "run-service-vs-torch: $bundle lacks matserve; bundle it with" \
         "scripts/device/bundle.sh BUILD BUILD/server/matserve" >&2
    exit 1
  fi
  server_cmd=("$bundle/with-env.sh" matserve)
  stubs=${MATSERVE_PYTHON_STUBS:-$bundle/python}
else
  : "${MATSERVE_SERVER:?no bundle at $bundle: set MATSERVE_SERVER (and MATSERVE_PYTHON_STUBS)}"
  server_cmd=("$MATSERVE_SERVER")
  stubs=${MATSERVE_PYTHON_STUBS:-}
fi

server_args=(--listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend="$backend")
if [ "$backend" = cuda ]; then
  server_args+=(--devices="$gpu")
  # The server's pool caches freed blocks up to its budget (default 90% of the GPU): cap it so
  # torch, in another process on the same GPU, keeps room.
  [[ "${SERVER_ARGS:-}" == *memory_budget_bytes* ]] ||
    server_args+=(--memory_budget_bytes=$((32 << 30)))
  [ "${GATE_LAUNCHES:-1}" = 0 ] || server_args+=(--gate_launches)
fi
export MATSERVE_SERVER_FLAGS="${server_args[*]:3} ${SERVER_ARGS:-}"
# shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
"${server_cmd[@]}" "${server_args[@]}" ${SERVER_ARGS:-} >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-service-vs-torch 600) || exit 1
echo "run-service-vs-torch: server (pid $server) on 127.0.0.1:$port, backend $backend"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv \
    | tee "$out/gpu.txt"
fi

# Python runs outside with-env.sh: the bundle's libraries (gRPC, protobuf, ...) are the server's,
# not for torch's process. The torch device is the server's GPU: both see the same ordinals.
targs=()
[ "$backend" = cuda ] && targs+=(--torch-device "cuda:$gpu")
PYTHONUNBUFFERED=1 PYTHONPATH="${stubs}${PYTHONPATH:+:$PYTHONPATH}" \
  "$python" -u "$here/service_vs_torch.py" --target "127.0.0.1:$port" --out "$out" \
  "${targs[@]}" "$@" 2>&1 | tee "$out/run.log"
rc=${PIPESTATUS[0]}

kill -TERM $server
wait $server
server_rc=$?
[ $server_rc -eq 0 ] || echo "run-service-vs-torch: the server exited with status $server_rc" >&2

if [ -f "$out/service_vs_torch.json" ] && "$python" -c "import matplotlib" 2>/dev/null; then
  "$python" "$here/plot_service_vs_torch.py" "$out/service_vs_torch.json" \
    "$out/service_vs_torch" || true
fi
echo "== service vs torch (script exit $rc, server exit $server_rc); outputs in $out =="
cat "$out/service_vs_torch.md" 2>/dev/null
[ "$rc" -eq 0 ] && [ $server_rc -eq 0 ]
