#!/usr/bin/env bash
# On a GPU machine, from the repository root, with a bundle made by scripts/device/bundle.sh:
# every GPU test binary, then the bundled server on loopback (CUDA backend) answering matserve-cli
# and the Python end-to-end GPU tests, then a /metrics scrape. Logs and the scrape go to $OUT
# (or /tmp). Prints a summary last; exit status 1 if anything failed.
# usage: scripts/device/run-checks.sh [BUNDLE_DIR]   (default build/device)
set -uo pipefail
bundle=${1:-build/device}
out=${OUT:-/tmp}
mkdir -p "$out"
dest=${MATSERVE_DEVICE_DIR:-/tmp/matserve-device}
status=()
failed=0
step() {  # step NAME COMMAND...: runs, records ok/FAILED
  local name=$1
  shift
  if "$@"; then status+=("ok      $name"); else status+=("FAILED  $name"); failed=1; fi
}

# Every GPU test binary, whole.
step "GPU test binaries" "$bundle/run-gpu-checks.sh"

"$bundle/with-env.sh" true
"$bundle/with-env.sh" matserve --listen=127.0.0.1:50051 --metrics_listen=127.0.0.1:9464 \
  --backend=cuda >"$out/server.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do grep -q "serving gRPC" "$out/server.log" 2>/dev/null && break; sleep 0.1; done
cat "$out/server.log"
cli() { "$bundle/with-env.sh" matserve-cli --target 127.0.0.1:50051 "$@"; }
step "cli info" cli info
step "cli kernels" cli kernels
step "cli multiply fp32 1024^3 auto --check" cli multiply --random 1024x1024x1024 --seed 7 --check
step "cli multiply bf16 2048^3 --check" cli multiply --random 2048x2048x2048 --dtype bf16 --seed 7 --check
step "cli transpose 4096x4096 --verify" cli transpose --random 4096x4096 --seed 7 --verify
step "python e2e (GPU)" env PYTHONPATH="$bundle/python:client/python:tests/e2e:tests/support" \
  MATSERVE_SERVER="$dest/bin/matserve" "$bundle/with-env.sh" python3 -m unittest -v test_gpu_service \
  test_gpu_batching
curl -s 127.0.0.1:9464/metrics >"$out/metrics.txt" || true
kill -TERM $server
wait $server
step "server exit 0 after SIGTERM" test $? -eq 0

echo "== device checks =="
printf '%s\n' "${status[@]}"
exit $failed
