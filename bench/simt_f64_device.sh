#!/usr/bin/env bash
# One GPU-machine call for the fp64 SIMT kernel simt_f64 (issue 4, fp64 target): its correctness
# tests (harness, layout, memcheck), gemm_bench fp64 squares against cuBLAS DGEMM and simt_tuned
# with the SM clock sampled alongside, and Nsight Compute counters (issue, stalls, shared-memory
# wavefronts, fp64 pipe) of simt_tuned and simt_f64 at 4096^3. Logs go to OUT_DIR/res, packed
# into OUT_DIR/all.tgz (the device tool returns at most 8 files); a summary is printed last.
# usage (GPU machine, bundle of build-simt carried):
#   build-simt/device/with-env.sh bench/simt_f64_device.sh OUT_DIR [VARIANTS] [SIZES]
set -uo pipefail
top=${1:?usage: simt_f64_device.sh OUT_DIR [VARIANTS] [SIZES]}
cands=${2:-simt_f64,simt_f64_128x192,simt_f64_128x128}
sizes=${3:-1024,2048,4096,8192}
out=$top/res
mkdir -p "$out/bench"
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
  | tee "$out/gpu.txt"
date -u '+%Y-%m-%d %H:%M UTC' | tee -a "$out/gpu.txt"

# 1. Correctness: every harness shape but 2048^3 (that one runs later), the layout test.
MATSERVE_TEST_VARIANTS=$cands MATSERVE_TEST_QUICK=1 timeout "${TESTS_S:-90}" \
  gemm_variants_gpu_test > "$out/tests.log" 2>&1
echo "variants test (quick) rc=$? $(grep -cE '^\[  FAILED' "$out/tests.log") failed lines" \
  | tee "$out/summary.txt"
timeout "${LAYOUT_S:-40}" simt_layout_gpu_test > "$out/layout.log" 2>&1
echo "layout test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/layout.log" | head -2 | tr '\n' ' ')" \
  | tee -a "$out/summary.txt"

# 2. Benchmark, fp64 NN squares, with the SM clock and power sampled every 100 ms.
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader \
  -lms 100 > "$out/bench/clocks.csv" 2>&1 &
smi=$!
timeout "${BENCH_S:-100}" "$here/../scripts/run-gemm-bench.sh" "$out/bench" \
  --variants=cublas,simt_tuned,$cands --sizes="$sizes" --families= --precisions=fp64 \
  --max-seconds-per-case=0.2 --skip-above-seconds=1.0
echo "bench rc=$?" | tee -a "$out/summary.txt"
kill "$smi" 2> /dev/null

# 3. Nsight Compute at 4096^3 fp64 NN, one launch each: simt_tuned (128x128) and the 12x8 kernel.
prof() {  # name, kernel regex, variant
  timeout "${NCU_S:-40}" ncu --clock-control none --section SpeedOfLight --section SchedulerStats \
    --section WarpStateStats --metrics smsp__cycles_active.avg,sm__cycles_elapsed.avg.per_second,sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__inst_executed.sum,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio \
    -k "regex:$2" -c 1 gemm_bench --variants="$3" --sizes=4096 --families= --precisions=fp64 \
    --warmup=0 --reps=1 > "$out/ncu-$1-4096.txt" 2>&1
  echo "ncu $1 rc=$?" | tee -a "$out/summary.txt"
}
prof tuned 'tuned_kernel' simt_tuned
prof f64 'f64_kernel' "${NCU_VARIANT:-simt_f64_128x192}"

# 4. memcheck on two small shapes (all four orders), then the 2048^3 harness cases.
MATSERVE_TEST_VARIANTS=$cands timeout "${MEMCHECK_S:-60}" compute-sanitizer --tool memcheck \
  gemm_variants_gpu_test --gtest_filter='*61x17x131*:*7x5x3*' > "$out/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -m1 'ERROR SUMMARY' "$out/memcheck.log")" | tee -a "$out/summary.txt"
MATSERVE_TEST_VARIANTS=$cands timeout "${LAST_TESTS_S:-40}" gemm_variants_gpu_test \
  --gtest_filter='*2048x2048x2048*' > "$out/tests-2048.log" 2>&1
echo "variants test 2048 rc=$? $(grep -cE '^\[       OK' "$out/tests-2048.log") ok" \
  "$(grep -cE '^\[  FAILED' "$out/tests-2048.log") failed lines" | tee -a "$out/summary.txt"

# Pack, then the summary last.
cp "$out/bench/gemm.md" "$out/bench/autotune.tsv" "$top/" 2> /dev/null
tar -C "$top" -czf "$top/all.tgz" res
grep -E '^\[  (PASSED|FAILED)|tests? ran' "$out/tests.log" | head -8
for f in "$out"/ncu-*-4096.txt; do
  echo "== $(basename "$f")"
  grep -E 'SM Frequency|Duration|Issued Warp|No Eligible|Compute \(SM\)|L1/TEX Cache|pipe_fp64|wavefronts|op_shared_ld|bank_conflicts|inst_executed.sum|Registers' \
    "$f" | head -16
  grep -E 'issue_stalled' "$f" | sed 's/smsp__average_warps_issue_stalled_//;s/_per_issue_active.ratio//' | head -11
done
awk -F', ' '{gsub(/ MHz/, "", $2); gsub(/ W/, "", $3); if ($2 + 0 > 0) {n++; s += $2; p += $3;
  if (min == "" || $2 + 0 < min) min = $2 + 0}} END {if (n) printf "SM clock during bench: mean %.0f MHz, min %d MHz, mean power %.0f W (%d samples)\n", s / n, min, p / n, n}' \
  "$out/bench/clocks.csv"
cat "$out/summary.txt"
grep -E '^\| (cublas|simt|auto)' "$out/bench/gemm.md" 2> /dev/null | head -12
