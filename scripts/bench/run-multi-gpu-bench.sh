#!/usr/bin/env bash
# Multi-GPU scaling of the service: the same closed-loop load (independent fp32 multiplies on
# resident operands, one A/B pair per client worker, colocated) against one server using 1 GPU and
# then every visible GPU, with GPU utilization sampled by nvidia-smi during each run. Writes
# scaling.md (table + ratio), one load-<N>gpu.json per run and the utilization samples to $OUT.
#
# usage: scripts/bench/run-multi-gpu-bench.sh [BUNDLE_DIR]     (default build/device)
# Environment: SCALE_SHAPE [4096], SCALE_CONCURRENCY [64], BENCH_DURATION seconds [6].
set -uo pipefail
bundle=${1:-build/device}
out=${OUT:-/tmp/matserve-multi-gpu}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
shape=${SCALE_SHAPE:-4096}
conc=${SCALE_CONCURRENCY:-64}
ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
[ "$ngpu" -ge 1 ] || { echo "run-multi-gpu-bench: no GPU" >&2; exit 1; }
all=$(seq -s, 0 $((ngpu - 1)))

run_one() {  # $1 = device list, $2 = label
  local sub="$out/run-$2"
  mkdir -p "$sub"
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader,nounits -lms 250 \
    >"$sub/util.csv" 2>/dev/null &
  local smi=$!
  OUT="$sub" SERVER_ARGS="--devices=$1" BENCH_SHAPES=$shape BENCH_MODES=resident \
    BENCH_CONCURRENCY=$conc BENCH_DURATION=${BENCH_DURATION:-6} BENCH_COMPARE_CLIENTS=0 \
    "$here/run-service-bench.sh" "$bundle" >"$sub/stdout.log" 2>&1
  local rc=$?
  kill $smi 2>/dev/null
  wait $smi 2>/dev/null
  cp "$sub/load.json" "$out/load-$2.json" 2>/dev/null
  return $rc
}

run_one 0 1gpu || echo "run-multi-gpu-bench: the 1-GPU run failed (see $out/run-1gpu)" >&2
if [ "$ngpu" -gt 1 ]; then
  run_one "$all" "${ngpu}gpu" || echo "run-multi-gpu-bench: the ${ngpu}-GPU run failed" >&2
fi

python3 - "$out" "$ngpu" "$shape" "$conc" <<'PY'
import csv, json, os, sys
from datetime import datetime
out, ngpu, shape, conc = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def busy(path, start, end):
    """Mean nvidia-smi utilization per GPU (share of time a kernel was running) over the samples
    inside the bench's timed window [start, end] (Unix seconds; uploads and warm-up left out)."""
    per = {}
    try:
        for row in csv.reader(open(path)):
            if len(row) < 3:
                continue
            try:
                t = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
            except ValueError:
                continue
            if start <= t <= end:
                per.setdefault(int(row[1]), []).append(float(row[2]))
    except FileNotFoundError:
        return {}
    return {gpu: sum(v) / len(v) for gpu, v in per.items() if v}

rows, rate = [], {}
for label in ["1gpu"] + ([f"{ngpu}gpu"] if ngpu > 1 else []):
    p = os.path.join(out, f"load-{label}.json")
    if not os.path.exists(p):
        rows.append(f"| {label} | failed | | | | | |")
        continue
    r = (json.load(open(p)).get("runs") or [{}])[0]
    rps = r.get("ok_per_s") or 0
    rate[label] = rps
    lat = r.get("client_us", {})
    start = r.get("start_unix_s", 0)
    # the first second after the window opens is left out: nvidia-smi averages over its period
    u = busy(os.path.join(out, f"run-{label}", "util.csv"), start + 1, start + r.get("wall_s", 0))
    util = ", ".join(f"GPU{g} {v:.0f}%" for g, v in sorted(u.items()))
    spread = ", ".join(f"{d.split()[0]} {n}" for d, n in sorted(r.get("devices_ran", {}).items()))
    rows.append(f"| {label} | {rps:.1f} | {lat.get('p50', 0):.0f} | {lat.get('p99', 0):.0f} | "
                f"{r.get('errors', 0)} | {spread} | {util} |")
with open(os.path.join(out, "scaling.md"), "w") as f:
    f.write(f"resident fp32 {shape}^3 multiplies, concurrency {conc}, variant auto\n\n")
    f.write("| GPUs | ok req/s | p50 us | p99 us | errors | requests per device | "
            "GPU utilization (nvidia-smi, mean while loaded) |\n")
    f.write("|---|---:|---:|---:|---:|---|---|\n")
    f.write("\n".join(rows) + "\n")
    if len(rate) == 2 and rate.get("1gpu"):
        f.write(f"\nscaling: {rate[f'{ngpu}gpu'] / rate['1gpu']:.2f}x on {ngpu} GPUs\n")
print(open(os.path.join(out, "scaling.md")).read())
PY
