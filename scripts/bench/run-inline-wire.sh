#!/usr/bin/env bash
# Inline requests against gRPC's own floor. First grpc-wire-ceiling: gRPC alone moving a 4096^3
# fp32 call's bytes (128 MiB up, 64 MiB back) over TCP loopback and a Unix socket, with no copy
# outside gRPC, with the one copy each end of a service makes, and through the callback API. Then
# matserve on loopback with matserve-bench's inline multiplies at concurrency 1, in rounds.
# Writes wire.md (both tables), <round>.json and server.log to $OUT (default
# /tmp/matserve-inline-wire); prints wire.md last.
#
# usage: scripts/bench/run-inline-wire.sh [BUNDLE_DIR]     (default build/device)
#   The bundle must hold matserve, matserve-bench and grpc-wire-ceiling; without one set
#   MATSERVE_SERVER, MATSERVE_BENCH and MATSERVE_WIRE_CEILING. Environment: MATSERVE_BACKEND
#   [cuda], WIRE_SHAPES [1024,4096], WIRE_REQUESTS per shape [12], WIRE_ROUNDS [2],
#   WIRE_CEILING_REPS [10].
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
bundle=${1:-build/device}
out=${OUT:-/tmp/matserve-inline-wire}
mkdir -p "$out"
# shellcheck source=../lib/bench-binaries.sh
source "$(dirname "$0")/../lib/bench-binaries.sh"
resolve_bench_binaries "$bundle" run-inline-wire || exit 1
if [ -n "${MATSERVE_WIRE_CEILING:-}" ]; then
  ceiling_cmd=("$MATSERVE_WIRE_CEILING")
else
  ceiling_cmd=("$bundle/with-env.sh" grpc-wire-ceiling)
fi
backend=${MATSERVE_BACKEND:-cuda}
reps=${WIRE_CEILING_REPS:-10}
rounds=${WIRE_ROUNDS:-2}

"${server_cmd[@]}" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend="$backend" \
  >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-inline-wire 300) || exit 1
for round in $(seq 1 "$rounds"); do
  echo "run-inline-wire: matserve round $round" >&2
  "${bench_cmd[@]}" --target "127.0.0.1:$port" --shapes "${WIRE_SHAPES:-1024,4096}" \
    --modes inline --requests "${WIRE_REQUESTS:-12}" --warmup 2 --no-progress \
    --json "$out/$round.json" >"$out/$round.log" 2>&1 || echo "  bench exit $?" >&2
done
kill -TERM $server
wait $server

{
  echo "# Inline multiplies against gRPC's floor"
  echo
  echo "Date $(date -u '+%Y-%m-%d %H:%M UTC'), host $(hostname), backend $backend."
  if command -v nvidia-smi >/dev/null; then
    echo "Device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | paste -sd';')."
  fi
  echo
  echo "## matserve, inline at concurrency 1 (matserve-bench)"
  echo
  echo "| round | shape | requests | client p50 us | server total p50 us | client / server | client - server us |"
  echo "|---:|---|---:|---:|---:|---:|---:|"
  for round in $(seq 1 "$rounds"); do
    /usr/bin/env python3 - "$out/$round.json" "$round" <<'PY'
import json, sys
path, rnd = sys.argv[1:3]
try:
    doc = json.load(open(path))
except (OSError, ValueError):
    print(f"| {rnd} | (no report) | | | | | |")
    sys.exit(0)
for r in doc["runs"]:
    c, s = r["client_us"]["p50"], r["server_total_us"]["p50"]
    print(f"| {rnd} | {r['shape']} | {r['requests']} | {c:,.0f} | {s:,.0f} | "
          f"{c / s if s else 0:.2f} | {c - s:,.0f} |")
PY
  done
  echo
  echo "## gRPC alone (grpc-wire-ceiling: 128 MiB request, 64 MiB reply, $reps calls after 3 warm-up)"
  echo
  first=1
  for flags in "" "--copy" "--callback-api"; do
    echo "run-inline-wire: ceiling ${flags:-(no copy, blocking)}" >&2
    # shellcheck disable=SC2086
    if [ $first = 1 ]; then "${ceiling_cmd[@]}" --reps "$reps" $flags; else
      "${ceiling_cmd[@]}" --reps "$reps" $flags | tail -n +3; fi
    first=0
  done
} >"$out/wire.md"
cat "$out/wire.md"
