#!/usr/bin/env bash
# Runs the whole test suite of an existing build several times in a row, as CI would but
# harder: `ctest -j JOBS` on however few cores the machine has, optionally beside CPU hogs (busy
# loops at normal priority, one more than the cores), and stops at the first failing round. A
# flaky test shows up here; a suite that passes every round under load has none we can see.
# Prints one line per round and a summary; each round's full log goes to LOG_DIR.
#
# usage: scripts/ci/check-suite-under-load.sh [ROUNDS] [--hog]     (default 5 rounds, no hog)
# env:   BUILD_DIR (default build), JOBS (default 4), LOG_DIR (default /tmp/suite-under-load),
#        HOGS (how many busy loops --hog starts; default one more than the cores)
set -uo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
hog=0
[ "${2:-}" = "--hog" ] && hog=1
build=${BUILD_DIR:-build}
jobs=${JOBS:-4}
logs=${LOG_DIR:-/tmp/suite-under-load}
mkdir -p "$logs"
hogs=()
stop_hogs() { [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null; hogs=(); }
trap stop_hogs EXIT
if [ $hog -eq 1 ]; then
  for _ in $(seq 1 "${HOGS:-$(( $(nproc) + 1 ))}"); do
    (while :; do :; done) &
    hogs+=($!)
  done
fi
echo "suite-under-load: $rounds rounds of ctest -j $jobs on $(nproc) cores$([ $hog -eq 1 ] && echo ", with ${#hogs[@]} CPU hogs")"
passed=0
for r in $(seq 1 "$rounds"); do
  start=$(date +%s)
  (cd "$build" && ctest -j "$jobs" --timeout 900 --output-on-failure) >"$logs/round-$r.log" 2>&1
  rc=$?
  summary=$(grep -E "tests passed|tests failed" "$logs/round-$r.log" | tail -1)
  echo "round $r: exit $rc, $(( $(date +%s) - start )) s: $summary"
  if [ $rc -ne 0 ]; then
    grep -A20 "The following tests FAILED" "$logs/round-$r.log"
    echo "suite-under-load: FAILED in round $r ($passed passed before it); log $logs/round-$r.log"
    exit 1
  fi
  passed=$((passed + 1))
done
echo "suite-under-load: $passed of $rounds rounds passed"
