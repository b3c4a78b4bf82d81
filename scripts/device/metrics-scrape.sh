#!/usr/bin/env bash
# On a GPU machine, from the repository root, with a bundle from scripts/device/bundle.sh that
# holds matserve and matserve-cli: starts the bundled server (CUDA backend; BACKEND=cpu tries the
# script without a GPU), loads it for LOAD_SECONDS with WORKERS clients (GEMMs in fp32/tf32/fp16/
# bf16 over several variants, transposes, an invalid request), scrapes /metrics during and after
# the load and summarizes the scrapes (scripts/bench/metrics_summary.py). Files go to $OUT (or /tmp):
# metrics-mid.txt, metrics-under-load.txt, metrics-final.txt, summary.txt, server.log,
# load-errors.log, run.log (nvidia-smi, kernels, rounds). docs/metrics-device-scrape.txt: a run.
# usage: scripts/device/metrics-scrape.sh [BUNDLE_DIR]      (default build/device)
set -uo pipefail
bundle=${1:-build/device}
out=${OUT:-/tmp}
mkdir -p "$out"
seconds=${LOAD_SECONDS:-60}
workers=${WORKERS:-4}
here=$(cd "$(dirname "$0")" && pwd)
metrics=127.0.0.1:9464
target=127.0.0.1:50051

log="$out/run.log"
nvidia-smi >"$log" 2>&1 || true
"$bundle/with-env.sh" true
"$bundle/with-env.sh" matserve --listen=$target --metrics_listen=$metrics \
  --backend="${BACKEND:-cuda}" >"$out/server.log" 2>&1 &
server=$!
for _ in $(seq 1 300); do
  grep -q "serving gRPC" "$out/server.log" 2>/dev/null && break
  sleep 0.1
done
cat "$out/server.log"
cli() { "$bundle/with-env.sh" matserve-cli --target $target "$@"; }
cli kernels >>"$log" 2>&1 || true
scrape() {  # curl, or Python where curl is missing
  curl -sf "http://$metrics/metrics" 2>/dev/null ||
    python3 -c "import urllib.request as u, sys
sys.stdout.write(u.urlopen('http://$metrics/metrics').read().decode())"
}
q() { cli "$@" >/dev/null; }

# One client: the mix, over and over, until the deadline. Failures are expected for the invalid
# request (INVALID_ARGUMENT); others land in load-errors.log.
worker() {
  local end=$(($(date +%s) + seconds)) i=0
  while [ "$(date +%s)" -lt $end ]; do
    q multiply --random 2048x2048x2048 --variant cublas
    q multiply --random 2048x2048x2048 --variant warptile
    q multiply --random 2048x2048x2048 --compute tf32 --variant cublaslt
    q multiply --random 2048x2048x2048 --dtype bf16 --variant cublas
    q multiply --random 2048x2048x2048 --dtype bf16 --variant wgmma
    q multiply --random 2048x2048x2048 --dtype fp16 --variant mma_sync
    q multiply --random 2048x2048x2048 --dtype fp16
    q multiply --random 1024x1024x1024 --variant smem_tiled_32
    q transpose --random 4096x4096 --variant transpose_tiled
    q transpose --random 4096x4096 --variant transpose_naive
    q transpose --random 4096x4096 --variant cublas_geam
    q multiply --random 3x4x5 --variant no_such_kernel 2>/dev/null
    i=$((i + 1))
  done
  echo "worker $1: $i rounds"
}
start=$(date +%s)
pids=()
for w in $(seq 1 "$workers"); do
  worker "$w" >>"$log" 2>>"$out/load-errors.log" &
  pids+=($!)
done
sleep $((seconds / 2))
scrape >"$out/metrics-mid.txt"
nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw,clocks.sm --format=csv >>"$log" 2>&1
sleep 5
scrape >"$out/metrics-under-load.txt"
wait "${pids[@]}"
echo "load: $workers workers for $(($(date +%s) - start)) s"
sleep 1
scrape >"$out/metrics-final.txt"
kill -TERM $server
wait $server
echo "server exit: $?"
{
  echo "== summary of the final scrape (since start) =="
  python3 "$here/../bench/metrics_summary.py" "$out/metrics-final.txt"
  echo
  echo "== throughput in the 5 s window under load (mid -> under-load scrape) =="
  python3 "$here/../bench/metrics_summary.py" "$out/metrics-under-load.txt" "$out/metrics-mid.txt" |
    sed -n '/Achieved/,/^$/p'
} | tee "$out/summary.txt"
others=$(grep -vc 'no_such_kernel' "$out/load-errors.log" 2>/dev/null)
echo "load errors other than the deliberately invalid request: ${others:-0} (load-errors.log)"
