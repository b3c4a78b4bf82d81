#!/usr/bin/env bash
# On the GPU machine: runs every bundled GPU test binary (*_gpu_test), whole (no filter, no quick
# mode, every variant: MATSERVE_TEST_QUICK and MATSERVE_TEST_VARIANTS are cleared), each split into
# gtest shards that run as parallel processes on the one GPU (their float64 references and checks
# are CPU work, which is what the suite waits on), and prints one summary line per binary and the
# whole suite's wall time. Every test still runs exactly once. Logs go to $OUT (or /tmp):
# gpu-checks.log (all shards, one after another) and gpu-checks-shards/. Exit status 1 if any
# shard failed.
# usage: build/device/run-gpu-checks.sh
# env:   GPU_CHECK_JOBS (parallel processes, default: cores / 2, at most 8),
#        GPU_CHECK_SHARDS (shards per binary, default GPU_CHECK_JOBS)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp}
mkdir -p "$out/gpu-checks-shards"
log="$out/gpu-checks.log"
: > "$log"
"$here/with-env.sh" true
dest=${MATSERVE_DEVICE_DIR:-/tmp/matserve-device}
cores=$(nproc)
jobs=${GPU_CHECK_JOBS:-$(( cores / 2 > 8 ? 8 : (cores / 2 < 1 ? 1 : cores / 2) ))}
shards=${GPU_CHECK_SHARDS:-$jobs}
threads=$(( cores / jobs < 1 ? 1 : cores / jobs ))
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$log"
echo "$jobs processes at a time, $shards shards per binary, $threads BLAS threads each" | tee -a "$log"

# One shard of one binary: its log and, on the last line, its exit status and seconds.
run_shard() {
  local bin=$1 index=$2 shard_log
  shard_log="$out/gpu-checks-shards/$(basename "$bin").$index.log"
  local start=$SECONDS
  env -u MATSERVE_TEST_QUICK -u MATSERVE_TEST_VARIANTS GTEST_TOTAL_SHARDS="$shards" \
    GTEST_SHARD_INDEX="$index" OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads" \
    "$here/with-env.sh" "$bin" --gtest_brief=1 >"$shard_log" 2>&1
  echo "shard-exit $? $(( SECONDS - start ))" >>"$shard_log"
}
export -f run_shard
export here out shards threads

suite_start=$SECONDS
binaries=("$dest"/bin/*_gpu_test)
# Longest first: the variant sweep starts at once instead of trailing behind the short binaries.
for bin in "${binaries[@]}"; do
  for index in $(seq 0 $((shards - 1))); do
    case $bin in *gemm_variants*|*transpose_variants*) echo "0 $bin $index" ;; *) echo "1 $bin $index" ;; esac
  done
done | sort -s -k1,1n | cut -d' ' -f2- | xargs -P "$jobs" -L 1 bash -c 'run_shard "$0" "$1"'
suite_seconds=$(( SECONDS - suite_start ))

failed=0
summary=()
for bin in "${binaries[@]}"; do
  name=$(basename "$bin")
  passed=0 failures=0 skipped=0 slowest=0 rc_all=0
  for index in $(seq 0 $((shards - 1))); do
    shard_log="$out/gpu-checks-shards/$name.$index.log"
    { echo "== $name shard $index/$shards"; cat "$shard_log"; } >>"$log"
    read -r _ rc secs < <(grep '^shard-exit' "$shard_log" | tail -1)
    [ "${rc:-1}" -eq 0 ] || rc_all=1
    [ "${secs:-0}" -gt "$slowest" ] && slowest=$secs
    p=$(sed -nE 's/^\[  PASSED  \] ([0-9]+) tests?.*/\1/p' "$shard_log" | tail -1)
    f=$(sed -nE 's/^\[  FAILED  \] ([0-9]+) tests?, listed below.*/\1/p' "$shard_log" | tail -1)
    s=$(sed -nE 's/^\[  SKIPPED \] ([0-9]+) tests?.*/\1/p' "$shard_log" | tail -1)
    passed=$((passed + ${p:-0})) failures=$((failures + ${f:-0})) skipped=$((skipped + ${s:-0}))
  done
  summary+=("$(printf '%-36s rc=%d  slowest shard %4ds  passed %d, failed %d, skipped %d' \
    "$name" "$rc_all" "$slowest" "$passed" "$failures" "$skipped")")
  [ $rc_all -eq 0 ] || failed=1
done
{
  echo "== GPU checks =="
  printf '%s\n' "${summary[@]}"
  echo "whole GPU suite: ${suite_seconds} s wall"
  [ $failed -eq 0 ] && echo "ALL GPU CHECKS PASSED" || echo "SOME GPU CHECKS FAILED (see $log)"
} | tee -a "$log"
exit $failed
