#!/usr/bin/env bash
# Inline-bytes staging with and without pinned message memory, in one run on one GPU: runs the
# service benchmark (inline 4096^3 and 1024^3 fp32, concurrency 1 and 8) three times, A/B/A:
# the default server (operands and results in the pinned message heap, DMA with no staging copy),
# then --pinned_message_bytes=0 (every buffer through the staging rings), then the default again.
# Writes pinned-a.md, staged-b.md, pinned-c.md into OUT_DIR and prints, per run, shape,
# concurrency, errors, req/s, client p50, server p50, h2d p50 (us) and H2D GB/s.
# usage: scripts/bench/run-pinned-messages-ab.sh OUT_DIR [BUNDLE_DIR]   (BUNDLE_DIR default build/device)
set -uo pipefail
out=${1:?usage: run-pinned-messages-ab.sh OUT_DIR [BUNDLE_DIR]}
bundle=${2:-build/device}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
run() {  # name, server flags
  local work
  work=$(mktemp -d)
  OUT=$work SERVER_ARGS="$2" BENCH_SHAPES=${AB_SHAPES:-4096,1024} BENCH_MODES=inline \
    BENCH_CONCURRENCY=${AB_CONCURRENCY:-1,8} BENCH_DURATION=${AB_DURATION:-3} \
    BENCH_COMPARE_CLIENTS=0 timeout 300 "$here/run-service-bench.sh" "$bundle" >/dev/null 2>&1
  cp "$work/load.md" "$out/$1.md"
  echo "== $1 (server flags: ${2:-none})"
  grep -E '^\| [0-9]+x' "$work/load.md" | awk -F'|' '{print $2,$6,$8,$9,$10,$15,$21,$22}'
  rm -rf "$work"
}
echo "shape conc errors req/s client-p50 srv-p50 h2d-p50 H2D-GB/s"
run pinned-a ""
run staged-b "--pinned_message_bytes=0"
run pinned-c ""
