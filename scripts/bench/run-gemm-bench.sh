#!/usr/bin/env bash
# The GEMM kernel benchmark in one command: every CUDA GEMM variant of the registry, fp32 and fp64,
# square 512..8192 and the rectangular families, cuBLAS in the same run; writes gemm.json, gemm.md,
# autotune.tsv and the progress log into OUT_DIR; with GEMM_PLOT_DIR set (and matplotlib
# importable), also the plots (scripts/bench/plot_gemm.py) into that folder.
# usage: scripts/bench/run-gemm-bench.sh OUT_DIR [gemm_bench options...]   (on the GPU machine, e.g.
#        build-simt/device/with-env.sh scripts/bench/run-gemm-bench.sh "$OUT")
set -euo pipefail
out=${1:?usage: run-gemm-bench.sh OUT_DIR [gemm_bench options]}
shift
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
bench=$(command -v gemm_bench || echo "$here/../../build/bench/gemm_bench")
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
  > "$out/gpu.txt" 2>/dev/null || true
stdbuf -oL -eL "$bench" --json="$out/gemm.json" --md="$out/gemm.md" \
  --autotune-out="$out/autotune.tsv" "$@" 2> "$out/gemm-progress.log" > /dev/null
if [ -n "${GEMM_PLOT_DIR:-}" ]; then
  for py in /usr/bin/python3 python3; do
    if "$py" -c 'import matplotlib' 2>/dev/null; then
      "$py" "$here/plot_gemm.py" "$out/gemm.json" "$GEMM_PLOT_DIR"
      break
    fi
  done
fi
echo "run-gemm-bench: results in $out ($(wc -l < "$out/autotune.tsv") autotune rows)"
