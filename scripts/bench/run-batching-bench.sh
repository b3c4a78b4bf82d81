#!/usr/bin/env bash
# Batching benchmark: what MultiplyBatched and the server's dynamic batching give, measured through
# the server with matserve-bench on resident operands.
#   1. One MultiplyBatched call of BATCH products (default 1000 x 64^3 fp32) per request, concurrency
#      1, against single resident Multiply calls of the same shape at concurrency 64: products/s.
#   2. Resident 256^3 fp32 Multiply at concurrency 1 and 64, on a server without dynamic batching
#      and on one with it (--max_batch_size 64 --max_batch_delay_us 500): req/s, p50, p99.
#   3. What bounds that rate: health-check pings (no matrix work) at concurrency 64 from one
#      client process and from CLIENT_PROCS processes, and the resident runs of 2. from
#      CLIENT_PROCS processes (64 / CLIENT_PROCS workers each), with and without batching.
# Writes batching.json (every run), batching.md (the tables and ratios), bench.log and the two
# server logs to $OUT (default /tmp/matserve-batching-bench); prints batching.md.
#
# usage: scripts/bench/run-batching-bench.sh [BUNDLE_DIR]    (default build/device)
# Environment: MATSERVE_BACKEND [cuda], BATCH [1000], BATCH_SHAPE [64], DYN_SHAPE [256],
#   BENCH_DURATION seconds per run [5], BENCH_WARMUP per worker [20], COMPUTE [fp32] (matserve-bench
#   --compute; PRECISION, its former name, still read),
#   BATCHING_ARGS [--max_batch_size=64 --max_batch_delay_us=500], CLIENT_PROCS [4].
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/server-port.sh
source "$here/../lib/server-port.sh"
# shellcheck source=../lib/bench-binaries.sh
source "$here/../lib/bench-binaries.sh"
bundle=${1:-build/device}
out=${OUT:-/tmp/matserve-batching-bench}
mkdir -p "$out"
resolve_bench_binaries "$bundle" run-batching-bench || exit 1
backend=${MATSERVE_BACKEND:-cuda}
compute=${COMPUTE:-${PRECISION:-fp32}}
common=(--duration "${BENCH_DURATION:-5}" --warmup "${BENCH_WARMUP:-20}" --compute "$compute"
        --modes resident --no-progress)
: >"$out/bench.log"

# run_server LABEL [FLAGS...]: starts a server, sets $server and $target.
run_server() {
  local label=$1
  shift
  "${server_cmd[@]}" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend="$backend" "$@" \
    >"$out/server-$label.log" 2>&1 &
  server=$!
  local port
  port=$(wait_for_server_port "$out/server-$label.log" $server run-batching-bench 300) || exit 1
  target=127.0.0.1:$port
}

# bench NAME ARGS...: one matserve-bench run into $out/NAME.json.
bench() {
  local name=$1
  shift
  echo "== $name: matserve-bench ${common[*]} $*" | tee -a "$out/bench.log" >&2
  "${bench_cmd[@]}" --target "$target" "${common[@]}" "$@" --json "$out/$name.json" \
    >>"$out/bench.log" 2>&1 || echo "run-batching-bench: $name failed" >&2
}

# bench_procs NAME ARGS...: CLIENT_PROCS matserve-bench processes at once, 64 / CLIENT_PROCS
# workers each, into $out/NAME-pK.json.
procs=${CLIENT_PROCS:-4}
bench_procs() {
  local name=$1 pids=() p
  shift
  echo "== $name: $procs x matserve-bench ${common[*]} --concurrency $((64 / procs)) $*" |
    tee -a "$out/bench.log" >&2
  for p in $(seq 1 "$procs"); do
    "${bench_cmd[@]}" --target "$target" "${common[@]}" --concurrency $((64 / procs)) "$@" \
      --json "$out/$name-p$p.json" >>"$out/bench.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}" || echo "run-batching-bench: $name failed" >&2
}

run_server off
bench batched --shapes "${BATCH_SHAPE:-64}" --batch "${BATCH:-1000}" --concurrency 1
bench singles --shapes "${BATCH_SHAPE:-64}" --concurrency 64
bench dynamic-off --shapes "${DYN_SHAPE:-256}" --concurrency 1,64
bench ping --modes ping --concurrency 64
bench_procs ping-procs --modes ping
bench_procs dynamic-off-procs --shapes "${DYN_SHAPE:-256}"
kill -TERM $server
wait $server

# shellcheck disable=SC2086  # a list of flags
read -r -a batching_args <<<"${BATCHING_ARGS:---max_batch_size=64 --max_batch_delay_us=500}"
run_server on "${batching_args[@]}"
bench dynamic-on --shapes "${DYN_SHAPE:-256}" --concurrency 1,64
bench_procs dynamic-on-procs --shapes "${DYN_SHAPE:-256}"
kill -TERM $server
wait $server

device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
python3 "$here/batching_summary.py" "$out" --device "${device:-$backend}" \
  --server-args "${batching_args[*]}" --backend "$backend"
cat "$out/batching.md"
