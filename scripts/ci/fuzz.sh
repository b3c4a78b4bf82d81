#!/usr/bin/env bash
# Builds the libFuzzer request fuzzer (clang, ASan + UBSan, CPU-only) in build-fuzz and fuzzes
# for a bounded time over a scratch copy of tests/fuzz/corpus: request decoding/validation, and
# sessions of calls on the real service in process (streams, resident matrices; one core).
# A finding (crash, leak, sanitizer report, invariant) is copied to tests/fuzz/regression/, where
# the plain test fuzz_regression replays it in every build once it is fixed; the script then fails.
#
# usage: scripts/ci/fuzz.sh [SECONDS]               build (if needed) and fuzz (default 60 s)
#        scripts/ci/fuzz.sh --run-only FUZZER [SECONDS]   fuzz with an already built binary
# env:   FUZZ_BUILD_DIR (default build-fuzz), JOBS, CXX_FUZZ (default clang++),
#        FUZZ_ARGS (more libFuzzer flags, e.g. -runs=1000000 with SECONDS 0 for no time limit),
#        FUZZ_LOG (a file to keep libFuzzer's whole log in)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

if [ "${1:-}" = "--run-only" ]; then
  fuzzer=$2
  seconds=${3:-60}
else
  seconds=${1:-60}
  build=${FUZZ_BUILD_DIR:-build-fuzz}
  cxx=${CXX_FUZZ:-clang++}
  if ! command -v "$cxx" >/dev/null; then
    echo "fuzz: SKIPPED: $cxx not found; install clang (Debian/Ubuntu package clang)" >&2
    exit 77
  fi
  cc=${cxx/clang++/clang}
  start=$(date +%s)
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMATSERVE_CUDA=OFF \
      -DMATSERVE_FUZZ=ON -DBUILD_TESTING=OFF -DMATSERVE_BUILD_BENCH=OFF \
      -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" >/dev/null
  fi
  cmake --build "$build" -j "${JOBS:-$(nproc)}" --target request_fuzzer
  echo "fuzz: build took $(( $(date +%s) - start )) s"
  fuzzer=$build/tests/fuzz/request_fuzzer
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
cp "$root"/tests/fuzz/corpus/* "$work/corpus/"
cp "$root"/tests/fuzz/regression/* "$work/corpus/" 2>/dev/null || true

echo "fuzz: $fuzzer for ${seconds} s over $(ls "$work/corpus" | wc -l) seed inputs"
rc=0
# A smaller ASan quarantine than the default 256 MiB: freed blocks come back sooner, so the
# service's allocations touch fewer fresh pages. One OpenBLAS thread: the matrices are tiny.
# shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:quarantine_size_mb=64 \
  LSAN_OPTIONS=suppressions="$root/tests/fuzz/lsan.supp" \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 OPENBLAS_NUM_THREADS=1 \
  "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" ${FUZZ_ARGS:-} "$work/corpus" \
  >"$work/log" 2>&1 || rc=$?
tail -n 25 "$work/log"
if [ -n "${FUZZ_LOG:-}" ]; then cp "$work/log" "$FUZZ_LOG"; fi
echo "fuzz: last status: $(grep -E '^#[0-9]+' "$work/log" | tail -n 1)"
found=$(ls "$work/artifacts" | wc -l)
if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
  for f in "$work"/artifacts/*; do
    [ -e "$f" ] || continue
    cp "$f" "$root/tests/fuzz/regression/$(basename "$f")"
    echo "fuzz: FINDING kept as tests/fuzz/regression/$(basename "$f")"
  done
  echo "fuzz: FAILED (exit $rc, $found findings)" >&2
  exit 1
fi
echo "fuzz: OK, no findings in ${seconds} s"
