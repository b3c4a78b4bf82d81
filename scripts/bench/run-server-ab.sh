#!/usr/bin/env bash
# Two server binaries side by side through the same client load: for each round, starts server A
# on loopback, runs matserve-bench, stops it, then the same for B, so drift of the machine shows
# as round-to-round spread rather than as a difference. For "no slower than before" checks of a
# change to the server. Writes ab.md (the table), <A|B>-<round>.json and logs to $OUT (default
# /tmp/matserve-server-ab); prints the table last.
#
# usage: scripts/bench/run-server-ab.sh SERVER_A SERVER_B [BUNDLE_DIR]   (default build/device)
#   SERVER_A, SERVER_B: executables taking matserve's flags (e.g. a wrapper that runs another
#   build through the bundle's with-env.sh). matserve-bench comes from the bundle or
#   MATSERVE_BENCH. Environment: MATSERVE_BACKEND [cuda], AB_ROUNDS [3], AB_ARGS (matserve-bench's
#   load; default resident 256^3 and inline 256^3, 1024^3 at concurrency 1, 2 s each).
#   To compare clients as well as servers: BENCH_A / BENCH_B (each side's matserve-bench), and
#   PYCLIENT_A / PYCLIENT_B (a PYTHONPATH holding that side's matserve_client and stubs): then
#   each round also times that side's Python client on small inline products
#   (python_small_calls.py; PY_ARGS, default --sizes 64,256; PYTHON [python3]).
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
server_a=$1
server_b=$2
bundle=${3:-build/device}
out=${OUT:-/tmp/matserve-server-ab}
mkdir -p "$out"
if [ -n "${MATSERVE_BENCH:-}" ]; then bench_cmd=("$MATSERVE_BENCH"); else
  bench_cmd=("$bundle/with-env.sh" matserve-bench); fi
backend=${MATSERVE_BACKEND:-cuda}
read -r -a load <<<"${AB_ARGS:---shapes 256,1024 --modes resident,inline --concurrency 1 --duration 2}"

{
  echo "# Two servers under the same load"
  echo
  echo "Date $(date -u '+%Y-%m-%d %H:%M UTC'), host $(hostname), backend $backend."
  echo "A: \`$server_a\`; B: \`$server_b\`; load: \`${load[*]}\`."
  echo
  echo "| round | server | shape | mode | requests | client p50 us | client p90 us | server total p50 us |"
  echo "|---:|---|---|---|---:|---:|---:|---:|"
} >"$out/ab.md"
for round in $(seq 1 "${AB_ROUNDS:-3}"); do
  for side in A B; do
    if [ $side = A ]; then server=$server_a; else server=$server_b; fi
    "$server" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --backend="$backend" \
      >"$out/$side-$round.server.log" 2>&1 &
    pid=$!
    port=$(wait_for_server_port "$out/$side-$round.server.log" $pid run-server-ab 300) || exit 1
    echo "run-server-ab: round $round server $side" >&2
    side_bench=("${bench_cmd[@]}")
    own_bench=BENCH_$side
    [ -n "${!own_bench:-}" ] && side_bench=("${!own_bench}")
    "${side_bench[@]}" --target "127.0.0.1:$port" "${load[@]}" --warmup 20 --no-progress \
      --json "$out/$side-$round.json" >"$out/$side-$round.bench.log" 2>&1 ||
      echo "  bench exit $?" >&2
    pyclient=PYCLIENT_$side
    if [ -n "${!pyclient:-}" ]; then
      # shellcheck disable=SC2086  # PY_ARGS is a list of flags
      PYTHONPATH=${!pyclient} "${PYTHON:-python3}" "$(dirname "$0")/python_small_calls.py" \
        "127.0.0.1:$port" "$round" "$side" ${PY_ARGS:-} >"$out/$side-$round.python.md" \
        2>"$out/$side-$round.python.log" || echo "  python client exit $?" >&2
    fi
    kill -TERM $pid
    wait $pid
    /usr/bin/env python3 - "$out/$side-$round.json" "$round" "$side" >>"$out/ab.md" <<'PY'
import json, sys
path, rnd, side = sys.argv[1:4]
try:
    doc = json.load(open(path))
except (OSError, ValueError):
    print(f"| {rnd} | {side} | (no report) | | | | | |")
    sys.exit(0)
for r in doc["runs"]:
    c, s = r["client_us"], r["server_total_us"]
    print(f"| {rnd} | {side} | {r['shape']} | {r['mode']} | {r['requests']} | {c['p50']:,.0f} | "
          f"{c['p90']:,.0f} | {s['p50']:,.0f} |")
PY
    [ -f "$out/$side-$round.python.md" ] && cat "$out/$side-$round.python.md" >>"$out/ab.md"
  done
done
cat "$out/ab.md"
