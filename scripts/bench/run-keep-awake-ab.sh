#!/usr/bin/env bash
# Latency with and without --keep_cpus_awake_ms, in one run on one machine: ROUNDS rounds
# (default 3), each running the service benchmark's ping (the gRPC floor) and resident 256^3 fp32
# at concurrency 1 (results released inline, between calls) first against the default server,
# then against one started with --keep_cpus_awake_ms=$AB_WINDOW_MS (default 100). Writes
# <name>.md per run into OUT_DIR and prints, per run, mode, requests, errors, client p50/p90/p99,
# server p50 and overhead p50 (us).
# usage: scripts/bench/run-keep-awake-ab.sh OUT_DIR [BUNDLE_DIR]   (BUNDLE_DIR default build/device)
set -uo pipefail
out=${1:?usage: run-keep-awake-ab.sh OUT_DIR [BUNDLE_DIR]}
bundle=${2:-build/device}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
run() {  # name, server flags
  local work
  work=$(mktemp -d)
  OUT=$work SERVER_ARGS="$2" BENCH_SHAPES=${AB_SHAPES:-256} BENCH_MODES=ping,resident \
    BENCH_CONCURRENCY=1 BENCH_DURATION=${AB_DURATION:-3} BENCH_RELEASE=inline \
    BENCH_COMPARE_CLIENTS=0 timeout 300 "$here/run-service-bench.sh" "$bundle" >/dev/null 2>&1
  cp "$work/load.md" "$out/$1.md"
  grep -E '^\| [0-9]+x' "$work/load.md" |
    awk -F'|' -v n="$1" '{printf "%-10s %-9s %7s %4s %8s %8s %8s %7s %7s\n", n, $3, $7, $8, $10, $11, $13, $15, $19}'
  rm -rf "$work"
}
echo "run        mode      requests err client-p50 p90 p99 srv-p50 ovh-p50"
for r in $(seq 1 "${ROUNDS:-3}"); do
  run "default-$r" ""
  run "awake-$r" "--keep_cpus_awake_ms=${AB_WINDOW_MS:-100}"
done
