#!/usr/bin/env bash
# Tensor-core GEMM checks and benchmarks, run on the GPU machine from the repo root over
# a device bundle made by: scripts/device/bundle.sh build-tc build-tc/tests/kernels/{gemm_variants,
# tensor_core_k8192,tensor_core_fp8}_gpu_test build-tc/bench/tc_bench. Logs/JSON go to $OUT.
# usage: scripts/bench/run-tensor-core-bench.sh [DEVICE_DIR] [tests|sanitize|bench|all] [TC_BENCH_ARGS...]
#   bench/all without extra args run the standard suite (16-bit NN, transposes, tf32 NT, fp8).
set -uo pipefail
dev=${1:-build-tc/device}
mode=${2:-all}
shift 2 || shift $#
out=${OUT:-/tmp/tc-out}
mkdir -p "$out"
env_sh="$dev/with-env.sh"
variants=${TC_VARIANTS:-wmma,mma_sync,wgmma,wgmma_tma_store,cublaslt}
rc=0
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  date -u +%Y-%m-%dT%H:%MZ; } | tee "$out/device.txt"

if [ "$mode" = tests ] || [ "$mode" = all ]; then
  : >"$out/tests.log"
  for t in gemm_variants_gpu_test tensor_core_k8192_gpu_test tensor_core_fp8_gpu_test; do
    MATSERVE_TEST_VARIANTS=$variants "$env_sh" stdbuf -oL "$t" --gtest_brief=1 \
      >>"$out/tests.log" 2>&1 || rc=1
  done
  grep -E '^\[  (PASSED|FAILED)  \]|Failure|rel_l2|Expected|Which is' "$out/tests.log" | head -n 40
fi
if [ "$mode" = sanitize ] || [ "$mode" = all ]; then
  MATSERVE_TEST_VARIANTS=$variants MATSERVE_TEST_QUICK=1 "$env_sh" compute-sanitizer \
    --tool memcheck --error-exitcode 3 gemm_variants_gpu_test --gtest_brief=1 \
    --gtest_filter='*17x9x33*:*61x17x131*:*129x257x4099_NN*:*129x257x4099_TT*' \
    >"$out/sanitizer.log" 2>&1 || rc=1
  "$env_sh" compute-sanitizer --tool memcheck --error-exitcode 3 tensor_core_fp8_gpu_test \
    --gtest_brief=1 --gtest_filter='*17x9x33*:*129x257x4099_NN*' >>"$out/sanitizer.log" 2>&1 || rc=1
  grep -E 'ERROR SUMMARY|PASSED|FAILED' "$out/sanitizer.log" | tail -n 6
fi
bench() {  # bench NAME ARGS...: one tc_bench run, table to $out/bench_NAME.txt, JSON appended
  local name=$1
  shift
  "$env_sh" stdbuf -oL tc_bench --json="$out/tmp.json" "$@" | tee "$out/bench_$name.txt" || rc=1
  cat "$out/tmp.json" >>"$out/tc_bench.json" && rm -f "$out/tmp.json"
}
if [ "$mode" = bench ] || [ "$mode" = all ]; then
  : >"$out/tc_bench.json"
  if [ $# -gt 0 ]; then
    bench custom "$@"
  else
    bench 16bit --precisions=bf16,fp16 --rect
    bench trans --precisions=bf16 --sizes=4096,8192 --trans=NT,TN,TT --variants=wgmma,wgmma_tma_store,cublaslt
    bench tf32 --precisions=tf32 --trans=NT --rect --variants=wgmma,cublaslt
    bench fp8 --precisions=fp8,fp8q --trans=NT --variants=cublaslt_fp8
  fi
fi
exit $rc
