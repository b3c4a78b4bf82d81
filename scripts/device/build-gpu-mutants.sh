#!/usr/bin/env bash
# Builds gemm_variants_gpu_test once per planted GPU-kernel bug, for run-gpu-mutants.sh to show on
# a GPU machine that the variant test fails on each (the CPU mutation check, scripts/ci/mutants.sh,
# cannot reach CUDA kernels). Each bug is planted in the working tree, the test target rebuilt
# incrementally, its binary copied (stripped) to BUILD_DIR/gpu-mutants/MUTANT.gemm_variants_gpu_test,
# and the file restored from git (also on error or interrupt); the target is rebuilt unmutated at
# the end. The mutants are packed into BUILD_DIR/device/gpu-mutants.tar.xz, beside the bundle.
# The planted files must have no uncommitted changes.
# usage: scripts/device/build-gpu-mutants.sh [BUILD_DIR]   (default build; a CUDA build)
set -euo pipefail
repo=$(git -C "$(dirname "$0")/../.." rev-parse --show-toplevel)
build=${1:-build}
out="$build/gpu-mutants"
target=gemm_variants_gpu_test
cd "$repo"
mkdir -p "$out"

# MUTANT | VARIANT (what run-gpu-mutants.sh selects) | PRECISIONS it must fail in | FILE | FIND |
# REPLACE  (\n = newline)
mutants=(
  "naive_zero_tile|naive|fp32 fp64|kernels/gemm/naive.cu|  simt::store_c(g.c, g.ldc, i, j, acc, g.alpha, g.beta);|  if (i / 32 == 1 \&\& j / 32 == 1) acc = T(0), g.beta = T(0);  // planted: one 32x32 tile zero\n  simt::store_c(g.c, g.ldc, i, j, acc, g.alpha, g.beta);"
  "naive_edge_column_k|naive|fp32 fp64|kernels/gemm/naive.cu|  for (i64 p = 0; p < g.k; ++p) {|  for (i64 p = j == g.n - 1 ? 1 : 0; p < g.k; ++p) {  // planted: last column misses k = 0"
  "wgmma_zero_tile|wgmma|tf32 fp16 bf16|kernels/gemm/wgmma_gemm_sm90a.cu|      const float v0 = p.alpha * acc[j * 4 + h * 2], v1 = p.alpha * acc[j * 4 + h * 2 + 1];|      const bool zero = gi / 32 == 1 \&\& gj / 32 == 1;  // planted: one 32x32 tile zero\n      const float v0 = zero ? 0.0f : p.alpha * acc[j * 4 + h * 2];\n      const float v1 = zero ? 0.0f : p.alpha * acc[j * 4 + h * 2 + 1];"
)

planted=""
restore() { [ -n "$planted" ] && git checkout -- "$planted"; planted=""; }
trap restore EXIT INT TERM

for entry in "${mutants[@]}"; do
  IFS='|' read -r name variant precisions file find replace <<<"$entry"
  if ! git diff --quiet -- "$file"; then
    echo "build-gpu-mutants: $file has uncommitted changes; commit or stash them first" >&2
    exit 1
  fi
  planted=$file
  /usr/bin/python3 - "$file" "$find" "$replace" <<'EOF'
import sys
path, find, replace = sys.argv[1], sys.argv[2], sys.argv[3].replace("\\n", "\n").replace("\\&", "&")
text = open(path).read()
if text.count(find) != 1:
    sys.exit(f"{path}: the text to replace occurs {text.count(find)} times, not once")
open(path, "w").write(text.replace(find, replace))
EOF
  echo "== $name ($variant): $file"
  cmake --build "$build" --target "$target" >"$out/$name.build.log" 2>&1 ||
    { echo "build failed: $out/$name.build.log" >&2; exit 1; }
  cp "$(find "$build/tests" -name "$target" -type f -executable | head -n 1)" \
    "$out/$name.$target"
  strip "$out/$name.$target"
  echo "$variant" >"$out/$name.variant"
  echo "$precisions" >"$out/$name.precisions"
  restore
done
echo "== rebuilding $target unmutated"
cmake --build "$build" --target "$target" >"$out/restore.build.log" 2>&1
mkdir -p "$build/device"
(cd "$out" && tar -cJf - ./*."$target" ./*.variant ./*.precisions) >"$build/device/gpu-mutants.tar.xz"
ls -l "$build/device/gpu-mutants.tar.xz"
