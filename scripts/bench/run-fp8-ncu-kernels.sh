#!/usr/bin/env bash
# Which kernels an fp8 e4m3 A x B^T product runs, and how long each takes under Nsight Compute, in
# the server and in torch._scaled_mm: starts the bundled matserve under `ncu` (one metric,
# gpu__time_duration.sum, clocks left alone), makes resident e4m3 calls through the Python client
# (3 calls per size and variant, bf16 result kept and released), stops it, then runs torch's call 3
# times per size under ncu. Prints each side's kernel names with their durations (ns) and the
# replies' kernel_us; writes ncu-server.csv, ncu-torch.csv, calls.log and server.log to $OUT
# (default /tmp/matserve-fp8-ncu). Needs ncu and PyTorch with CUDA on the machine.
#
# usage: scripts/bench/run-fp8-ncu-kernels.sh [BUNDLE_DIR]   (default build/device)
# Environment: SIZES [2048 8192], VARIANTS [cublaslt_fp8 wgmma_fp8], PORT [50051], PYTHON [python3]
set -uo pipefail
bundle=${1:-build/device}
out=${OUT:-/tmp/matserve-fp8-ncu}
mkdir -p "$out"
"$bundle/with-env.sh" true || exit 1
lib=/tmp/matserve-device/lib
port=${PORT:-50051}
python=${PYTHON:-python3}
read -r -a sizes <<<"${SIZES:-2048 8192}"
read -r -a variants <<<"${VARIANTS:-cublaslt_fp8 wgmma_fp8}"
LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64 ncu --clock-control none \
  --metrics gpu__time_duration.sum --csv --log-file "$out/ncu-server.csv" \
  /tmp/matserve-device/bin/matserve --listen="127.0.0.1:$port" --metrics_listen=127.0.0.1:0 \
  --backend=cuda --memory_budget_bytes=$((8 << 30)) >"$out/server.log" 2>&1 &
server=$!
for _ in $(seq 120); do grep -q "serving gRPC" "$out/server.log" && break; sleep 1; done
PYTHONPATH="$bundle/python:$(dirname "$0")/../../client/python" "$python" - "$port" \
  "${sizes[*]}" "${variants[*]}" >"$out/calls.log" 2>&1 <<'PY'
import sys
import numpy as np
from matserve_client import Client
from matserve_client.dtypes import Float8E4M3
port, sizes, variants = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
rng = np.random.default_rng(1)
with Client(f"127.0.0.1:{port}", timeout=300) as c:
    c.wait_ready(60)
    for n in map(int, sizes):
        def bits():  # random finite e4m3 patterns
            return Float8E4M3(rng.integers(0, 256, size=(n, n), dtype=np.uint8) & 0xB7)
        ha = c.upload(bits())
        hb = c.upload(bits(), colocate_with=ha)
        for v in variants:
            for _ in range(3):
                r = c.multiply(ha, hb, transpose_b=True, compute="fp8", out_dtype="bf16",
                               keep_result=True, variant=v)
                print(n, v, r.variant, f"kernel_us {r.timing.kernel_us:.1f}", flush=True)
                r.resident.release()
        ha.release()
        hb.release()
PY
rc=$?
kill -TERM $server
wait $server
LD_LIBRARY_PATH=/usr/local/cuda/lib64 ncu --clock-control none --metrics gpu__time_duration.sum \
  --csv --log-file "$out/ncu-torch.csv" "$python" -c "
import sys, torch
one = torch.tensor(1.0, device='cuda')
for n in map(int, sys.argv[1].split()):
    a = torch.randn(n, n, device='cuda').to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device='cuda').to(torch.float8_e4m3fn).t()
    for _ in range(3):
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
torch.cuda.synchronize()" "${sizes[*]}" >"$out/torch.log" 2>&1 || rc=1
summary() {  # kernel name | duration ns, the GEMM kernels only
  grep -v '^==' "$1" | awk -F'","' 'NR > 1 {print $5 " | " $NF}' | tr -d '"' |
    grep -E 'nvjet|wgmma|gemm|sm90' || true
}
echo "== replies"; cat "$out/calls.log"
echo "== server kernels (ncu, ns)"; summary "$out/ncu-server.csv"
echo "== torch kernels (ncu, ns)"; summary "$out/ncu-torch.csv"
exit $rc
