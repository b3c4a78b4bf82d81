#!/usr/bin/env bash
# Striped transfer through the C++ client: starts the bundled matserve on loopback (CUDA backend),
# runs matserve-bench (concurrency 1, fp32 N^3, operands and result moved each call) inline and
# striped over every STRIPES x RANGE_BYTES pair and with the client's defaults, then times PyTorch
# doing the same product locally from and to host arrays ((torch.from_numpy(a).cuda() @
# torch.from_numpy(b).cuda()).cpu().numpy(), median of 11 after 3). Prints and writes
# $OUT/stripe-sweep.md (default /tmp/matserve-stripe-sweep): client p50, server total p50, and
# the ratio to torch of the same shape, all from this one run.
#
# usage: scripts/bench/run-stripe-sweep.sh [BUNDLE_DIR]   (default build/device)
# env:   SHAPES (default "1024 4096 8192"), STRIPES (default "4 8 16"),
#        RANGE_BYTES (default "1048576 2097152 4194304 8388608"), DURATION (seconds a run, 4),
#        INLINE (default 1; 0 leaves out the inline runs), OTHER_BENCH (another matserve-bench
#        executable, e.g. from the build before a client change: every run is then made with it
#        too, right after the bundle's, labelled "[other]"; it runs with the bundle's libraries)
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
bundle=${1:-build/device}
out=${OUT:-/tmp/matserve-stripe-sweep}
mkdir -p "$out"
"$bundle/with-env.sh" true || exit 1
"$bundle/with-env.sh" matserve --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend=cuda \
  --memory_budget_bytes=$((32 << 30)) >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-stripe-sweep 600) || exit 1
rows=()
# One matserve-bench run: its p50 and server p50 columns.
bench() {
  local label=$1 shape=$2
  shift 2
  local line
  local exe=matserve-bench
  if [ "$label" != "${label%\[other\]}" ]; then exe=$OTHER_BENCH; fi
  line=$("$bundle/with-env.sh" "$exe" --target "127.0.0.1:$port" --shapes "$shape" \
    --concurrency 1 --warmup 1 --duration "${DURATION:-4}" --no-progress "$@" 2>"$out/bench.err" |
    grep -E "^ *${shape}x${shape}x${shape} \|" | tail -1)
  [ -n "$line" ] || { echo "run-stripe-sweep: no result for $shape $label" >&2; cat "$out/bench.err" >&2; return; }
  local p50 srv
  p50=$(echo "$line" | awk -F'|' '{gsub(/ /, "", $12); print $12}')
  srv=$(echo "$line" | awk -F'|' '{gsub(/ /, "", $17); print $17}')
  echo "$shape $label: client p50 $p50 us, server $srv us"
  rows+=("$shape|$label|$p50|$srv")
}
# The run, and with OTHER_BENCH the same run by the other client right after it.
both() {
  local label=$1
  shift
  bench "$label" "$@"
  if [ -n "${OTHER_BENCH:-}" ]; then bench "$label [other]" "$@"; fi
}
for shape in ${SHAPES:-1024 4096 8192}; do
  if [ "${INLINE:-1}" != 0 ]; then both "inline" "$shape" --modes inline; fi
  both "client defaults" "$shape" --modes striped
  for s in ${STRIPES:-4 8 16}; do
    for r in ${RANGE_BYTES:-1048576 2097152 4194304 8388608}; do
      both "striped $s x $((r >> 20)) MiB" "$shape" --modes striped --stripes "$s" --stripe-chunk-bytes "$r"
    done
  done
done
kill -TERM $server
wait $server
"${PYTHON:-python3}" - "$out" "${SHAPES:-1024 4096 8192}" "${rows[@]}" <<'PY'
import sys, time
import numpy as np
out, shapes, rows = sys.argv[1], [int(s) for s in sys.argv[2].split()], sys.argv[3:]
torch_ms = {}
try:
    import torch
    for n in shapes:
        a = np.random.rand(n, n).astype(np.float32); b = np.random.rand(n, n).astype(np.float32)
        f = lambda: (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy()
        for _ in range(3): f()
        ts = []
        for _ in range(11):
            t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
        torch_ms[n] = sorted(ts)[5] * 1e3
        device = torch.cuda.get_device_name(0)
except ImportError:
    device = "?"
lines = [f"# Striped transfer through matserve-bench ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {device})", "",
         "| fp32 N^3 | path | client p50 ms | server total p50 ms | / torch locally |", "|---|---|---:|---:|---:|"]
for n in shapes:
    if n in torch_ms:
        lines.append(f"| {n} | torch locally | {torch_ms[n]:.1f} | - | 1.00 |")
    for r in rows:
        shape, label, p50, srv = r.split("|")
        if int(shape) != n:
            continue
        ratio = f"{float(p50) / 1e3 / torch_ms[n]:.2f}" if n in torch_ms else "-"
        lines.append(f"| {n} | {label} | {float(p50) / 1e3:.1f} | {float(srv) / 1e3:.2f} | {ratio} |")
open(f"{out}/stripe-sweep.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
