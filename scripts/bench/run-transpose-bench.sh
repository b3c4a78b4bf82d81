#!/usr/bin/env bash
# Transpose benchmark, end to end. Two halves:
#   here (build machine):  scripts/bench/run-transpose-bench.sh bundle [BUILD_DIR]
#       builds transpose_bench + transpose_variants_gpu_test and bundles them (scripts/device/bundle.sh)
#   on the GPU machine:    scripts/bench/run-transpose-bench.sh device [BUILD_DIR]
#       GPU tests (full, then compute-sanitizer memcheck/racecheck on the small shapes), then the
#       benchmark (each stage under a timeout: T_TEST, T_SAN, T_BENCH seconds; SKIP_SAN=1 skips
#       the sanitizer); results in $OUT (or ./bench-out): transpose_bench.json/.md, logs, nvidia-smi
#   on the GPU machine:    scripts/bench/run-transpose-bench.sh tune [BUILD_DIR]
#       the tuning pass: quick GPU tests, Nsight Compute counters of the main kernels at 8192^2 fp32
#       (transpose_bench --profile: DRAM and L2 traffic, registers, occupancy; then the memory
#       sections of the vectorized / cuBLAS / in-place square kernels), then transpose_bench --tune
#       (every configuration, 8 shapes); T_TEST, T_NCU, T_BENCH seconds
#   here:                  scripts/bench/run-transpose-bench.sh resources [BUILD_DIR]
#       registers and spills of every transpose kernel (scripts/bench/transpose_resource_usage.py;
#       exit 1 on any spill)
#   back here:             scripts/bench/run-transpose-bench.sh plot RESULTS.json
#       draws docs/benchmarks/img/transpose.png
set -uo pipefail
mode=${1:?usage: run-transpose-bench.sh bundle|device|tune|resources|plot ...}
# On the GPU machine: build, out and env for BUILD_DIR ($1), and the device's identity in $out/$2.
on_device() {
  build=${1:-build}
  out=${OUT:-$PWD/bench-out}
  mkdir -p "$out"
  env="$build/device/with-env.sh"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/$2"
}
case "$mode" in
  bundle)
    build=${2:-build}
    cmake --build "$build" -j2 --target transpose_bench transpose_variants_gpu_test || exit 1
    scripts/device/bundle.sh "$build" "$build/bench/transpose_bench" \
      "$build/tests/kernels/transpose_variants_gpu_test"
    ;;
  device)
    on_device "${2:-}" nvidia-smi.txt
    rc=0
    timeout "${T_TEST:-300}" "$env" stdbuf -oL transpose_variants_gpu_test --gtest_brief=1 >"$out/gpu-test.log" 2>&1 || rc=1
    grep -E "differ|Failure|FAILED|error" "$out/gpu-test.log" | head -n 40
    tail -n 4 "$out/gpu-test.log"
    if [ -z "${SKIP_SAN:-}" ]; then
      MATSERVE_TEST_QUICK=1 timeout "${T_SAN:-150}" "$env" compute-sanitizer --tool memcheck --error-exitcode 9 \
        transpose_variants_gpu_test --gtest_brief=1 >"$out/sanitizer.log" 2>&1 || rc=1
      MATSERVE_TEST_QUICK=1 timeout "${T_SAN:-150}" "$env" compute-sanitizer --tool racecheck --error-exitcode 9 \
        transpose_variants_gpu_test --gtest_brief=1 \
        --gtest_filter='*33x65*:*96x160*:*64x64*:*10000x100*:*1000x40*:*300x1028*' >>"$out/sanitizer.log" 2>&1 || rc=1
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$out/sanitizer.log" | tail -n 8
    fi
    timeout "${T_BENCH:-300}" "$env" transpose_bench --json "$out/transpose_bench.json" --md "$out/transpose_bench.md" \
      2>"$out/bench.log" || rc=1
    cat "$out/transpose_bench.md"
    exit $rc
    ;;
  tune)
    on_device "${2:-}" smi.txt
    MATSERVE_TEST_QUICK=1 timeout "${T_TEST:-80}" "$env" stdbuf -oL transpose_variants_gpu_test \
      --gtest_brief=1 >"$out/test.log" 2>&1 || echo "GPU TESTS FAILED"
    tail -n 2 "$out/test.log"
    m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
    m=$m,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum
    m=$m,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,sm__warps_active.avg.pct_of_peak_sustained_active
    m=$m,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
    m=$m,sm__maximum_warps_per_active_cycle_pct,dram__throughput.avg.pct_of_peak_sustained_elapsed
    timeout "${T_NCU:-45}" "$env" ncu --clock-control none --metrics "$m" --csv transpose_bench --profile \
      >"$out/ncu.csv" 2>"$out/ncu.err"
    # Whole memory sections (L2 fabric, DRAM, L1) of the three kernels that matter at 8192^2 fp32.
    timeout "${T_NCU:-45}" "$env" ncu --clock-control none --section SpeedOfLight \
      --section MemoryWorkloadAnalysis_Chart --section MemoryWorkloadAnalysis_Tables --section Occupancy \
      --kernel-name 'regex:vectorized_kernel|transpose_readWrite|inplace_square' --launch-count 6 \
      --csv --page details transpose_bench --profile >"$out/ncu-sections.csv" 2>>"$out/ncu.err"
    timeout "${T_BENCH:-110}" "$env" transpose_bench --tune --json "$out/tune.json" --md "$out/tune.md" \
      2>"$out/tune.log"
    python3 scripts/bench/transpose_ncu_summary.py "$out/ncu.csv" "$out/ncu-summary.md" || tail -n 5 "$out/ncu.err"
    grep -E "8192x8192 \| fp32|16384x16384 \| fp32" "$out/tune.md" | cut -d'|' -f5,8 | tr '\n' ';'
    echo
    grep -E "8192x8192 \| (fp16|fp64)" "$out/tune.md" | cut -d'|' -f5,8 | tr '\n' ';'
    echo
    ;;
  resources)
    /usr/bin/python3 scripts/bench/transpose_resource_usage.py "${2:-build}" ${3:+--md "$3"}
    ;;
  plot)
    /usr/bin/python3 scripts/bench/plot_transpose.py "${2:?results json}" "${3:-docs/benchmarks/img/transpose.png}"
    ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
