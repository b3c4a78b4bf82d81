#!/usr/bin/env bash
# Service benchmark: starts matserve on loopback (CUDA backend by default), runs matserve-bench's
# sweep against it (fp32 multiplies, inline bytes and resident handles, several concurrencies),
# then a shared-vs-per-worker client comparison, and stops the server. Writes load.json/.csv/.md,
# client-compare.json/.md, server.log and bench.log (and load.png when matplotlib is there) to $OUT
# (default /tmp/matserve-service-bench); prints the Markdown table last.
#
# usage: scripts/bench/run-service-bench.sh [BUNDLE_DIR]     (default build/device; docs/load-testing.md)
#   With a bundle from scripts/device/bundle.sh (must contain matserve and matserve-bench) the
#   binaries run through BUNDLE_DIR/with-env.sh. Without one, set MATSERVE_SERVER and MATSERVE_BENCH
#   to the binaries (e.g. a CPU build: MATSERVE_BACKEND=cpu).
# Environment (defaults in brackets): MATSERVE_BACKEND [cuda], BENCH_SHAPES [256,1024,4096],
#   BENCH_MODES [ping,inline,resident] (ping: the gRPC round-trip floor), BENCH_CONCURRENCY
#   [1,8,64], BENCH_DURATION seconds per run [3], BENCH_WARMUP per worker [2], BENCH_VARIANTS [auto],
#   BENCH_COMPUTE [fp32] (matserve-bench --compute; BENCH_PRECISIONS, its former name, still read),
#   BENCH_COMPARE_CLIENTS [1] (0 skips the client comparison), BENCH_RELEASE [background]
#   (matserve-bench --release: inline keeps Release RPCs out of the way of timed calls),
#   BENCH_SETTLE_SECONDS [0] (untimed resident 256^3 load at concurrency 8 before the sweep: a
#   freshly started machine, e.g. a fresh microVM, runs slower for its first minutes),
#   SERVER_ARGS (extra server flags).
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
bundle=${1:-build/device}
out=${OUT:-/tmp/matserve-service-bench}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)

# shellcheck source=../lib/bench-binaries.sh
source "$here/../lib/bench-binaries.sh"
resolve_bench_binaries "$bundle" run-service-bench || exit 1
backend=${MATSERVE_BACKEND:-cuda}

# shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
"${server_cmd[@]}" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend="$backend" \
  ${SERVER_ARGS:-} >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-service-bench 300) || exit 1
target=127.0.0.1:$port

{
  echo "# matserve service benchmark"
  echo
  echo "Date $(date -u '+%Y-%m-%d %H:%M UTC'), host $(hostname), backend $backend."
  if command -v nvidia-smi >/dev/null; then
    echo "Device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | paste -sd';')."
  fi
  echo
} >"$out/load.md"

if [ "${BENCH_SETTLE_SECONDS:-0}" != 0 ]; then
  echo "run-service-bench: settling for ${BENCH_SETTLE_SECONDS} s (untimed load)" >&2
  "${bench_cmd[@]}" --target "$target" --shapes 256 --modes resident --concurrency 8 \
    --duration "$BENCH_SETTLE_SECONDS" --no-progress >/dev/null 2>&1
  echo "Settled first: ${BENCH_SETTLE_SECONDS} s of untimed resident 256^3 load at concurrency 8." \
    >>"$out/load.md"
fi

bench_args=(--target "$target" --shapes "${BENCH_SHAPES:-256,1024,4096}"
            --modes "${BENCH_MODES:-ping,inline,resident}" --concurrency "${BENCH_CONCURRENCY:-1,8,64}"
            --duration "${BENCH_DURATION:-3}" --warmup "${BENCH_WARMUP:-2}"
            --variants "${BENCH_VARIANTS:-auto}" --compute "${BENCH_COMPUTE:-${BENCH_PRECISIONS:-fp32}}"
            --release "${BENCH_RELEASE:-background}")
echo "Command: matserve-bench ${bench_args[*]} (server: matserve --backend=$backend ${SERVER_ARGS:-})" \
  >>"$out/load.md"
echo >>"$out/load.md"
"${bench_cmd[@]}" "${bench_args[@]}" --json "$out/load.json" --csv "$out/load.csv" \
  --markdown "$out/load.md.table" --no-progress >"$out/bench.log" 2>&1
rc=$?
cat "$out/load.md.table" >>"$out/load.md" 2>/dev/null
rm -f "$out/load.md.table"

rm -f "$out/client-compare.md" "$out/client-compare.json"
if [ "${BENCH_COMPARE_CLIENTS:-1}" != 0 ]; then
  head -n 4 "$out/load.md" >"$out/client-compare.md"
  for client in shared per-worker; do
    cmp_args=(--target "$target" --shapes 256 --modes inline,resident --concurrency 8,64
              --duration "${BENCH_DURATION:-3}" --warmup "${BENCH_WARMUP:-2}" --client "$client")
    echo "## --client $client: matserve-bench ${cmp_args[*]}" >>"$out/client-compare.md"
    echo >>"$out/client-compare.md"
    "${bench_cmd[@]}" "${cmp_args[@]}" --json "$out/client-$client.json" \
      --markdown "$out/client-compare.md.table" --no-progress >>"$out/bench.log" 2>&1
    cat "$out/client-compare.md.table" >>"$out/client-compare.md" 2>/dev/null
    echo >>"$out/client-compare.md"
    rm -f "$out/client-compare.md.table"
  done
  # One JSON file for both (the fewer files come back from a device run, the better).
  python3 - "$out" <<'PY' || true
import json, sys, os
out = sys.argv[1]
docs = {}
for c in ("shared", "per-worker"):
    p = os.path.join(out, f"client-{c}.json")
    if os.path.exists(p):
        docs[c] = json.load(open(p))
        os.remove(p)
json.dump(docs, open(os.path.join(out, "client-compare.json"), "w"), indent=1)
PY
fi

kill -TERM $server
wait $server
server_rc=$?
if python3 -c "import matplotlib" 2>/dev/null && [ -f "$out/load.json" ]; then
  python3 "$here/plot_load.py" "$out/load.json" "$out" --prefix load >/dev/null 2>&1 &&
    rm -f "$out/load.svg"
fi

tail -n 40 "$out/bench.log" | grep -E '^(errors in|error:)' || true
echo "== client comparison (shared vs per-worker) =="
grep -E '^\|' "$out/client-compare.md" | grep -v -- '---' || true
echo "== service benchmark (bench exit $rc, server exit $server_rc) =="
cat "$out/load.md"
[ $rc -eq 0 ] && [ $server_rc -eq 0 ]
