#!/usr/bin/env bash
# The fp64 CUDA-core ceiling beside cuBLAS DGEMM (issue 4): runs bench/fp64_peak twice while
# nvidia-smi samples the SM clock and power every 500 ms, and writes fp64-peak.md,
# fp64-peak-run2.md and sm-clocks.txt (the clock histogram) into OUT_DIR.
# usage: scripts/run-fp64-peak.sh OUT_DIR [fp64_peak options...]   (on the GPU machine, e.g.
#        build/device/with-env.sh scripts/run-fp64-peak.sh "$OUT")
set -euo pipefail
out=${1:?usage: run-fp64-peak.sh OUT_DIR [fp64_peak options]}
shift
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
bench=$(command -v fp64_peak || echo "$here/../build/bench/fp64_peak")
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
