#!/usr/bin/env bash
# On the GPU machine: runs every bundled GPU test binary (*_gpu_test), whole (no filter, no quick
# mode, every variant: MATSERVE_TEST_QUICK and MATSERVE_TEST_VARIANTS are cleared), and prints one
# summary line per binary and a total. Logs go to $OUT (or /tmp) as gpu-checks.log. Exit status 1
# if any failed. usage: build/device/run-gpu-checks.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "${OUT:-/tmp}"
log="${OUT:-/tmp}/gpu-checks.log"
: > "$log"
"$here/with-env.sh" true
dest=${MATSERVE_DEVICE_DIR:-/tmp/matserve-device}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$log"
failed=0
summary=()
for t in "$dest"/bin/*_gpu_test; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  start=$(date +%s)
  env -u MATSERVE_TEST_QUICK -u MATSERVE_TEST_VARIANTS "$here/with-env.sh" stdbuf -oL "$t" \
    --gtest_brief=1 >>"$log" 2>&1
  rc=$?
  line=$(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran|SKIPPED \]' "$log" | tail -n 3 | tr '\n' ' ')
  summary+=("$(printf '%-36s rc=%d %4ds  %s' "$name" "$rc" "$(( $(date +%s) - start ))" "$line")")
  [ $rc -eq 0 ] || failed=1
done
echo "== GPU checks =="
printf '%s\n' "${summary[@]}"
[ $failed -eq 0 ] && echo "ALL GPU CHECKS PASSED" || echo "SOME GPU CHECKS FAILED (see $log)"
exit $failed
