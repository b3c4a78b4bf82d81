#!/usr/bin/env bash
# The fp64 CUDA-core ceiling beside cuBLAS DGEMM: runs bench/fp64_peak twice while
# nvidia-smi samples the SM clock and power every 500 ms, and writes fp64-peak.md,
# fp64-peak-run2.md and sm-clocks.txt (the clock histogram) into OUT_DIR. With FP64_NCU=1 it then
# reads Nsight Compute counters (fp64 pipe, issue, stall reasons, SM clock) of one launch of
# simt_tuned at 4096^3 and of the inner-loop ceiling kernel: ncu-tuned-4096.txt, ncu-inner-4096.txt.
# usage: scripts/bench/run-fp64-peak.sh OUT_DIR [fp64_peak options...]   (on the GPU machine, e.g.
#        build/device/with-env.sh scripts/bench/run-fp64-peak.sh "$OUT")
set -euo pipefail
out=${1:?usage: run-fp64-peak.sh OUT_DIR [fp64_peak options]}
shift
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
bench=$(command -v fp64_peak || echo "$here/../../build/bench/fp64_peak")
gemm_bench=$(command -v gemm_bench || echo "$here/../../build/bench/gemm_bench")
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader -lms 500 > "$out/.clocks" &
sampler=$!
trap 'kill $sampler 2>/dev/null || true; rm -f "$out/.clocks"' EXIT
"$bench" --md="$out/fp64-peak.md" "$@"
"$bench" --md="$out/fp64-peak-run2.md" --reps=25 "$@" > /dev/null
kill $sampler 2>/dev/null || true
{
  echo "SM clock while fp64_peak ran (samples every 500 ms, idle samples included):"
  cut -d, -f1 "$out/.clocks" | sort | uniq -c | sort -k2 -n
} > "$out/sm-clocks.txt"
cat "$out/sm-clocks.txt"

if [ "${FP64_NCU:-0}" = 1 ]; then
  metrics=sm__cycles_elapsed.avg.per_second,sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active
  metrics+=,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
  for stall in wait math_pipe_throttle not_selected barrier dispatch_stall short_scoreboard \
    long_scoreboard mio_throttle lg_throttle; do
    metrics+=,smsp__warp_issue_stalled_${stall}_per_warp_active.pct
  done
  profile() {  # output name, kernel regex, command...
    local name=$1 kernel=$2
    shift 2
    { echo "ncu --clock-control none -k regex:$kernel -c 1 $*"
      ncu --clock-control none --metrics "$metrics" -k "regex:$kernel" -c 1 "$@" 2>&1 \
        | awk '/^\[[0-9]+\] /{p=1} p'; } > "$out/$name"
  }
  profile ncu-tuned-4096.txt tuned_kernel "$gemm_bench" --variants=simt_tuned --sizes=4096 \
    --families= --precisions=fp64 --warmup=0 --reps=1
  profile ncu-inner-4096.txt inner_loop "$bench" --sizes=256 --variants= --warmup=0 --reps=1
fi
