#!/usr/bin/env bash
# On the GPU machine: runs each mutant of build-gpu-mutants.sh (gemm_variants_gpu_test built with
# one planted kernel bug) on its variant and reports, per precision the variant claims, whether the
# test failed on it: a planted bug the test does not fail on is a blind spot. Exit 1 if any
# (mutant, precision) with a checked case went uncaught.
# usage: build/device/run-gpu-mutants.sh [NAME_REGEX]   (reads gpu-mutants.tar.xz beside it)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/with-env.sh" true
dir=/tmp/matserve-gpu-mutants
rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xJf "$here/gpu-mutants.tar.xz" || exit 1
out=${OUT:-/tmp}
mkdir -p "$out"
uncaught=0
printf '%-22s %-8s %-6s %s\n' mutant variant prec "failing checks"
for bin in "$dir"/*.gemm_variants_gpu_test; do
  name=$(basename "$bin" .gemm_variants_gpu_test)
  [[ $name =~ ${1:-.} ]] || continue
  variant=$(cat "$dir/$name.variant")
  log="$out/gpu-mutant-$name.log"
  MATSERVE_TEST_VARIANTS=$variant OPENBLAS_NUM_THREADS=$(nproc) "$here/with-env.sh" "$bin" \
    --gtest_filter='Shapes/GemmVariantsGpu.*' >"$log" 2>&1
  for prec in $(cat "$dir/$name.precisions"); do
    # check() names each run "<variant> <precision> out=..."; only a failing one prints it.
    failing=$(grep -cE "^(.*: )?$variant $prec out=" "$log")
    verdict=caught
    [ "$failing" -gt 0 ] || { verdict=UNCAUGHT; uncaught=1; }
    printf '%-22s %-8s %-6s %s (%s)\n' "$name" "$variant" "$prec" "$failing" "$verdict"
  done
  grep -E '^\[  (PASSED|FAILED)  \] [0-9]' "$log" | sed "s/^/  $name: /"
done
exit $uncaught
