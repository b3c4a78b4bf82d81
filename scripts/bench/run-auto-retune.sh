#!/usr/bin/env bash
# Re-derives `auto` from the service's own timings and measures it, in one run on one GPU:
#  1. scripts/bench/run-service-vs-torch.sh with every candidate variant (device time on both sides);
#  2. scripts/bench/autotune_from_service.py turns the candidates' median kernel times into
#     autotune rows (every precision); scripts/dev/merge_autotune.py lays them over the tables built
#     in (kernels/autotune/*.tsv): each class the run measured is taken from it whole;
#  3. the server is started again with --autotune_table=<merged table> and `auto` is measured
#     against torch (single GEMMs and, with BATCHED, MultiplyBatched against torch.bmm).
# Writes to $OUT (default /tmp/matserve-auto-retune): candidates/ and auto/ (each the outputs of
# run-service-vs-torch.sh), service-rows.tsv and merged.tsv.
#
# usage: scripts/bench/run-auto-retune.sh [BUNDLE_DIR] [SCRIPT ARGS...]   (default build/device)
# Environment: CANDIDATES (default auto,cublas,cublaslt,wgmma_tma_store,simt_tuned,smem_tiled_16,
#   dmma), BATCHED (default 'default'; 'none' skips MultiplyBatched), PYTHON [python3].
set -uo pipefail
bundle=build/device
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then bundle=$1; shift; fi
out=${OUT:-/tmp/matserve-auto-retune}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
candidates=${CANDIDATES:-auto,cublas,cublaslt,wgmma_tma_store,simt_tuned,smem_tiled_16,dmma}
mkdir -p "$out"

echo "== 1/3 candidates: $candidates"
OUT="$out/candidates" "$here/run-service-vs-torch.sh" "$bundle" --variants "$candidates" \
  --transpose-shapes none "$@" >"$out/candidates.log" 2>&1 || { tail -30 "$out/candidates.log"; exit 1; }
grep -A8 "geometric mean of the ratio" "$out/candidates/run.log"

echo "== 2/3 rows from the service's timings"
"$python" "$here/autotune_from_service.py" "$out/candidates/service_vs_torch.json" \
  --precisions fp32,tf32,fp16,bf16,fp64 >"$out/service-rows.tsv" || exit 1
cat "$repo"/kernels/autotune/*.tsv >"$out/built-in.tsv"
"$python" "$repo/scripts/dev/merge_autotune.py" "$out/built-in.tsv" "$out/service-rows.tsv" \
  -o "$out/merged.tsv" || exit 1
echo "$(grep -vc '^#' "$out/service-rows.tsv") rows measured, $(grep -vc '^#' "$out/merged.tsv") in the merged table"

echo "== 3/3 auto with the merged table"
SERVER_ARGS="--autotune_table=$out/merged.tsv ${SERVER_ARGS:-}" OUT="$out/auto" \
  "$here/run-service-vs-torch.sh" "$bundle" --variants auto --batched "${BATCHED:-default}" \
  "$@" >"$out/auto.log" 2>&1
rc=$?
grep -A8 "geometric mean of the ratio" "$out/auto/run.log"
exit $rc
