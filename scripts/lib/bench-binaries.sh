# Sourced by the benchmark drivers: finds the server and matserve-bench. usage:
#   resolve_bench_binaries BUNDLE_DIR NAME || exit 1
# With a bundle from scripts/device/bundle.sh (holding matserve and matserve-bench) both run
# through BUNDLE_DIR/with-env.sh; without one, MATSERVE_SERVER and MATSERVE_BENCH name them (e.g. a
# CPU build with MATSERVE_BACKEND=cpu). Sets the arrays server_cmd and bench_cmd.
resolve_bench_binaries() {
  local bundle=$1 name=$2
  if [ -x "$bundle/with-env.sh" ] && [ -z "${MATSERVE_SERVER:-}" ]; then
    # Unpacked once, before any server starts.
    if ! "$bundle/with-env.sh" sh -c 'command -v matserve && command -v matserve-bench' \
      >/dev/null; then
      echo "$name: $bundle lacks matserve or matserve-bench; bundle them with" \
        "scripts/device/bundle.sh BUILD BUILD/server/matserve BUILD/client/bench/matserve-bench" >&2
      return 1
    fi
    server_cmd=("$bundle/with-env.sh" matserve)
    bench_cmd=("$bundle/with-env.sh" matserve-bench)
  elif [ -n "${MATSERVE_SERVER:-}" ] && [ -n "${MATSERVE_BENCH:-}" ]; then
    server_cmd=("$MATSERVE_SERVER")
    bench_cmd=("$MATSERVE_BENCH")
  else
    echo "$name: no bundle at $bundle: set MATSERVE_SERVER and MATSERVE_BENCH" >&2
    return 1
  fi
}
