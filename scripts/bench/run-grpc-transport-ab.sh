#!/usr/bin/env bash
# gRPC transport settings side by side: for each configuration (integer channel arguments given to
# the server with --grpc_channel_args and to matserve-bench with --channel-arg), starts matserve on
# loopback, runs inline multiplies (operands and result in the messages) at concurrency 1, stops
# it, and tabulates client round trip against the server's own time. Writes ab.md (the table),
# <config>.json (matserve-bench's reports) and <config>.server.log to $OUT (default
# /tmp/matserve-grpc-ab); prints the table last.
#
# usage: scripts/bench/run-grpc-transport-ab.sh [BUNDLE_DIR]     (default build/device)
#   The bundle (scripts/device/bundle.sh) must hold matserve and matserve-bench; without one set
#   MATSERVE_SERVER and MATSERVE_BENCH. Environment: MATSERVE_BACKEND [cuda], AB_SHAPES
#   [1024,4096], AB_REQUESTS per shape [12], AB_CONFIGS (names from the list below, comma-separated;
#   default all).
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
bundle=${1:-build/device}
out=${OUT:-/tmp/matserve-grpc-ab}
mkdir -p "$out"
# shellcheck source=../lib/bench-binaries.sh
source "$(dirname "$0")/../lib/bench-binaries.sh"
resolve_bench_binaries "$bundle" run-grpc-transport-ab || exit 1
backend=${MATSERVE_BACKEND:-cuda}

frame=grpc.http2.max_frame_size=16777215
window=grpc.http2.lookahead_bytes=268435456
reads=grpc.experimental.tcp_max_read_chunk_size=67108864
minread=grpc.experimental.tcp_min_read_chunk_size=1048576
writes=grpc.http2.write_buffer_size=67108864
# name: channel arguments (both ends)
declare -A configs=(
  [default]=""
  [frame]="$frame"
  [window]="$window"
  [frame_window]="$frame,$window"
  [reads]="$reads,$minread"
  [all]="$frame,$window,$reads,$minread"
  [all_writes]="$frame,$window,$reads,$minread,$writes"
)
order=(default frame window frame_window reads all all_writes)
if [ -n "${AB_CONFIGS:-}" ]; then IFS=, read -r -a order <<<"$AB_CONFIGS"; fi

{
  echo "# gRPC transport settings: inline multiplies at concurrency 1"
  echo
  echo "Date $(date -u '+%Y-%m-%d %H:%M UTC'), host $(hostname), backend $backend."
  if command -v nvidia-smi >/dev/null; then
    echo "Device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | paste -sd';')."
  fi
  echo
  echo "| config | channel arguments | shape | client p50 us | server total p50 us | client / server | requests |"
  echo "|---|---|---|---:|---:|---:|---:|"
} >"$out/ab.md"

for name in "${order[@]}"; do
  args=${configs[$name]-}
  client_args=()
  for a in ${args//,/ }; do client_args+=(--channel-arg "$a"); done
  "${server_cmd[@]}" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend="$backend" \
    --grpc_channel_args="$args" >"$out/$name.server.log" 2>&1 &
  server=$!
  port=$(wait_for_server_port "$out/$name.server.log" $server run-grpc-transport-ab 300) || exit 1
  echo "run-grpc-transport-ab: $name" >&2
  "${bench_cmd[@]}" --target "127.0.0.1:$port" --shapes "${AB_SHAPES:-1024,4096}" --modes inline \
    --requests "${AB_REQUESTS:-12}" --warmup 2 --no-progress "${client_args[@]}" \
    --json "$out/$name.json" >"$out/$name.bench.log" 2>&1 || echo "  bench exit $?" >&2
  kill -TERM $server
  wait $server
  /usr/bin/env python3 - "$out/$name.json" "$name" "${args:--}" >>"$out/ab.md" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for r in doc["runs"]:
    c, s = r["client_us"]["p50"], r["server_total_us"]["p50"]
    print(f"| {sys.argv[2]} | `{sys.argv[3]}` | {r['shape']} | {c:,.0f} | {s:,.0f} | "
          f"{c / s if s else 0:.2f} | {r['requests']} |")
PY
done
cat "$out/ab.md"
