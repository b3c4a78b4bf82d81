#!/usr/bin/env bash
# One GPU-machine call for the simt_tuned rung: its correctness tests, the benchmark
# against cuBLAS and simt_pipelined, Nsight Compute counters at 4096^3 fp32 NN (cuBLAS, pipelined,
# tuned) and compute-sanitizer memcheck on small shapes. Results and logs go to OUT_DIR.
# usage (GPU machine, bundle of build-simt carried):
#   build-simt/device/with-env.sh bench/simt_tuned_device.sh OUT_DIR [SIZES] [FAMILIES]
set -uo pipefail
out=${1:?usage: simt_tuned_device.sh OUT_DIR [SIZES] [FAMILIES]}
sizes=${2:-1024,2048,4096,8192}
families=${3-wide,tall,random,thin}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
tuned=simt_tuned,simt_tuned_128x128,simt_tuned_64x64
export MATSERVE_TEST_VARIANTS=$tuned
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
  | tee "$out/gpu.txt"

# 1. Correctness: every harness shape but 2048^3 (that one runs last, as time allows).
MATSERVE_TEST_QUICK=1 timeout 150 gemm_variants_gpu_test > "$out/tests.log" 2>&1
echo "variants test (quick) rc=$? $(grep -cE '^\[  FAILED' "$out/tests.log") failed lines"
timeout 60 simt_layout_gpu_test >> "$out/tests.log" 2>&1
echo "layout test rc=$?"

# 2. Benchmark (fp32 and fp64, NN, squares and the rectangular families), then TN/NT/TT at 4096.
timeout 200 "$here/../scripts/bench/run-gemm-bench.sh" "$out/bench" \
  --variants=cublas,simt_pipelined,$tuned --sizes="$sizes" --families="$families" \
  --precisions=fp32,fp64 --max-seconds-per-case=0.25 --skip-above-seconds=1.0
echo "bench rc=$?"
for t in TN NT TT; do
  timeout 40 gemm_bench --variants=cublas,simt_pipelined,simt_tuned --sizes=4096 --families= \
    --precisions=fp32 --trans=$t --max-seconds-per-case=0.25 --md="$out/bench/trans-$t.md" \
    > /dev/null 2>> "$out/bench/gemm-progress.log"
done

# 3. Nsight Compute at 4096^3 fp32 NN: one launch of each kernel.
prof() {  # name, kernel regex, variants
  timeout 60 ncu --clock-control none --section SpeedOfLight --section SchedulerStats \
    --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats \
    --metrics sm__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed_op_shared_ld.sum \
    -k "regex:$2" -c 1 gemm_bench --variants="$3" --sizes=4096 --families= --precisions=fp32 \
    --warmup=0 --reps=1 > "$out/ncu-$1.txt" 2>&1
  echo "ncu $1 rc=$?"
}
prof cublas 'gemm' cublas
prof pipelined 'pipelined_kernel' simt_pipelined
prof tuned 'tuned_kernel' simt_tuned

# 4. compute-sanitizer memcheck on two small shapes, all four orders, both precisions.
timeout 90 compute-sanitizer --tool memcheck gemm_variants_gpu_test \
  --gtest_filter='*61x17x131*:*7x5x3*' > "$out/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -m1 'ERROR SUMMARY' "$out/memcheck.log")"

# 5. The 2048^3 harness cases, as time allows.
timeout "${LAST_TESTS_S:-60}" gemm_variants_gpu_test --gtest_filter='*2048x2048x2048*' \
  > "$out/tests-2048.log" 2>&1
echo "variants test 2048 rc=$? $(grep -cE '^\[       OK' "$out/tests-2048.log") ok"

# Summary last.
grep -E '^\[  (PASSED|FAILED)|tests? ran' "$out/tests.log" | head -12
for f in "$out"/ncu-*.txt; do
  echo "== $f"
  grep -E 'Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc Active|Warp Cycles Per Issued|Stall|ffma_pred_on.sum|smsp__inst_executed.sum|bank_conflicts|op_shared_ld|Compute \(SM\) Throughput' "$f" | head -24
done
grep -E '^\| (cublas|simt)' "$out/bench/gemm.md" | head -60
cat "$out"/bench/trans-*.md 2>/dev/null | grep -E '^\| (cublas|simt)'
