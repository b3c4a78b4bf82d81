#!/usr/bin/env bash
# One GPU-machine call for the fp64 configurations of simt_tuned (issue 4, fp64 target): their
# correctness tests, gemm_bench fp64 squares against cuBLAS DGEMM and simt_tuned with the SM clock
# and power sampled alongside, Nsight Compute counters for the 128x128 kernel at 4096^3, and the
# 2048^3 harness cases as time allows. Results and logs go to OUT_DIR; a summary is printed last.
# usage (GPU machine, bundle of build-simt carried):
#   build-simt/device/with-env.sh bench/simt_tuned_f64_device.sh OUT_DIR VARIANTS [SIZES]
set -uo pipefail
out=${1:?usage: simt_tuned_f64_device.sh OUT_DIR VARIANTS [SIZES]}
cands=${2:?usage: simt_tuned_f64_device.sh OUT_DIR VARIANTS [SIZES]}
sizes=${3:-1024,2048,4096,8192}
mkdir -p "$out/bench"
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
  | tee "$out/gpu.txt"

# 1. Correctness of the candidates: every harness shape but 2048^3 (that one runs last).
MATSERVE_TEST_VARIANTS=$cands MATSERVE_TEST_QUICK=1 timeout "${TESTS_S:-45}" \
  gemm_variants_gpu_test > "$out/tests.log" 2>&1
echo "variants test (quick) rc=$? $(grep -cE '^\[  FAILED' "$out/tests.log") failed lines"

# 2. Benchmark, fp64 NN squares, with the SM clock and power sampled every 100 ms.
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader \
  -lms 100 > "$out/bench/clocks.csv" 2>&1 &
smi=$!
timeout "${BENCH_S:-80}" "$here/../scripts/run-gemm-bench.sh" "$out/bench" \
  --variants=cublas,simt_tuned,$cands --sizes="$sizes" --families= --precisions=fp64 \
  --max-seconds-per-case=0.2 --skip-above-seconds=1.0
echo "bench rc=$?"
kill "$smi" 2> /dev/null

# 3. Nsight Compute, one launch of the 128x128 fp64 kernel at 4096^3 (issue and stall figures).
timeout "${NCU_S:-30}" ncu --clock-control none --section SpeedOfLight --section SchedulerStats \
  --section WarpStateStats --metrics smsp__cycles_active.avg,sm__cycles_elapsed.avg.per_second \
  -k 'regex:tuned_kernel' -c 1 gemm_bench --variants=simt_tuned --sizes=4096 --families= \
  --precisions=fp64 --warmup=0 --reps=1 > "$out/ncu-f64-4096.txt" 2>&1
echo "ncu rc=$?"
timeout 20 simt_layout_gpu_test > "$out/layout.log" 2>&1
echo "layout test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/layout.log" | head -2 | tr '\n' ' ')"

# 4. The 2048^3 harness cases of the candidates, as time allows.
MATSERVE_TEST_VARIANTS=$cands timeout "${LAST_TESTS_S:-30}" gemm_variants_gpu_test \
  --gtest_filter='*2048x2048x2048*' > "$out/tests-2048.log" 2>&1
echo "variants test 2048 rc=$? $(grep -cE '^\[       OK' "$out/tests-2048.log") ok" \
  "$(grep -cE '^\[  FAILED' "$out/tests-2048.log") failed lines"

# Summary last.
grep -E '^\[  (PASSED|FAILED)|tests? ran' "$out/tests.log" | head -8
grep -E 'SM Frequency|Issue Slots Busy|Issued Warp|No Eligible|Warp Cycles Per Issued|Duration' \
  "$out/ncu-f64-4096.txt" | head -10
awk -F', ' '{gsub(/ MHz/, "", $2); gsub(/ W/, "", $3); if ($2 + 0 > 0) {n++; s += $2; p += $3;
  if (min == "" || $2 + 0 < min) min = $2 + 0}} END {if (n) printf "SM clock during bench: mean %.0f MHz, min %d MHz, mean power %.0f W (%d samples)\n", s / n, min, p / n, n}' \
  "$out/bench/clocks.csv"
cat "$out/bench/gemm.md" 2> /dev/null | head -20
