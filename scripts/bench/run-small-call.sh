#!/usr/bin/env bash
# Where a small call's round trip goes: starts the bundled matserve on loopback (CUDA backend, one
# GPU), runs matserve-bench at concurrency 1 with a bare health check (ping: the gRPC round trip
# with no matrix work, answered on gRPC's callback threads), an echo (a ListResident call: the
# same client and transport, on the synchronous server threads Multiply runs on) and a resident
# multiply of the shape (default 256^3 fp32; result kept and released between calls, outside the
# timed call, or with RELEASES="inline next-call" also by the next multiply, which names it in
# release_handles: one RPC per call, as an echo is), and stops the server. The report gives each
# run's client p50 and the server's own total.
# With WAITS="block poll", RELEASES="inline next-call" and ROUNDS=N the client runs once per round,
# release mode (matserve-bench --release) and wait mode (--wait: asleep in gRPC, or polling for
# its replies so that no idle CPU of the client has to wake), alternating, against the same server.
# Writes small-call.md (a table: per round, release and wait mode, the health check's, the echo's
# and the multiply's client p50, the server's total and kernel p50, and multiply - (echo +
# total)), small-call[-ROUND-RELEASE-WAIT].{txt,json} and server.log to $OUT (default
# /tmp/matserve-small-call).
#
# usage: scripts/bench/run-small-call.sh [BUNDLE_DIR] [MATSERVE-BENCH ARGS...]  (default build/device)
# Environment: MATSERVE_BACKEND [cuda], SERVER_ARGS (extra server flags), SHAPES [256],
#   COMPUTE [fp32], DURATION [5] (seconds per run), WAITS [block], RELEASES [inline], ROUNDS [1].
set -uo pipefail
# shellcheck source=../lib/server-port.sh
source "$(dirname "$0")/../lib/server-port.sh"
bundle=build/device
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then bundle=$1; shift; fi
out=${OUT:-/tmp/matserve-small-call}
mkdir -p "$out"
if [ -x "$bundle/with-env.sh" ] && [ -z "${MATSERVE_SERVER:-}" ]; then
  "$bundle/with-env.sh" true || exit 1
  server_cmd=("$bundle/with-env.sh" matserve)
  bench_cmd=("$bundle/with-env.sh" matserve-bench)
else
  : "${MATSERVE_SERVER:?no bundle at $bundle: set MATSERVE_SERVER and MATSERVE_BENCH}"
  server_cmd=("$MATSERVE_SERVER")
  bench_cmd=("${MATSERVE_BENCH:?set MATSERVE_BENCH to the matserve-bench binary}")
fi
# shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
"${server_cmd[@]}" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --backend="${MATSERVE_BACKEND:-cuda}" ${SERVER_ARGS:-} >"$out/server.log" 2>&1 &
server=$!
port=$(wait_for_server_port "$out/server.log" $server run-small-call 300) || exit 1
read -r -a waits <<<"${WAITS:-block}"
read -r -a releases <<<"${RELEASES:-inline}"
rounds=${ROUNDS:-1}
rc=0
for round in $(seq 1 "$rounds"); do
  for release in "${releases[@]}"; do
    for wait in "${waits[@]}"; do
      name=small-call
      [ "${#waits[@]}" -gt 1 ] || [ "${#releases[@]}" -gt 1 ] || [ "$rounds" -gt 1 ] &&
        name=small-call-$round-$release-$wait
      echo "run-small-call: round $round, --release $release, --wait $wait" >&2
      "${bench_cmd[@]}" --target "127.0.0.1:$port" --modes ping,echo,resident \
        --shapes "${SHAPES:-256}" --compute "${COMPUTE:-fp32}" --concurrency 1 \
        --duration "${DURATION:-5}" --warmup 50 --release "$release" --wait "$wait" \
        --json "$out/$name.json" "$@" 2>&1 | tee "$out/$name.txt"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    done
  done
done
/usr/bin/env python3 - "$out" >"$out/small-call.md" <<'PY'
import glob, json, os, re, sys
out = sys.argv[1]
print("| round | release | wait | health check p50 us | echo p50 us | multiply p50 us |"
      " server total p50 us (kernel) | multiply - (echo + total) us |")
print("|---:|---|---|---:|---:|---:|---:|---:|")
rows = []
for path in glob.glob(os.path.join(out, "small-call*.json")):
    m = re.search(r"small-call-(\d+)-", os.path.basename(path))
    doc = json.load(open(path))
    flag = lambda name, default: (re.findall(rf"--{name} ([\w-]+)", doc.get("command_line", ""))
                                  or [default])[-1]
    rows.append((int(m.group(1)) if m else 1, flag("release", "background"),
                 flag("wait", "block"), doc))
for rnd, release, wait, doc in sorted(rows, key=lambda r: r[:3]):
    runs = {r["mode"]: r for r in doc["runs"]}
    if not {"ping", "echo", "resident"} <= runs.keys():
        print(f"| {rnd} | {release} | {wait} | (incomplete) | | | | |")
        continue
    ping, echo = runs["ping"]["client_us"]["p50"], runs["echo"]["client_us"]["p50"]
    mul = runs["resident"]["client_us"]["p50"]
    total = runs["resident"]["server_total_us"]["p50"]
    kernel = runs["resident"]["kernel_us"]["p50"]
    print(f"| {rnd} | {release} | {wait} | {ping:.1f} | {echo:.1f} | {mul:.1f} |"
          f" {total:.1f} ({kernel:.1f}) | {mul - echo - total:.1f} |")
PY
cat "$out/small-call.md"
kill -TERM $server
wait $server || rc=1
exit $rc
