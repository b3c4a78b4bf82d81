# Sourced by the benchmark drivers: waits for a matserve started in the background to print its
# gRPC port. usage: port=$(wait_for_server_port LOG PID NAME [TENTHS]) || exit 1
# Prints the port; on failure (the process ended, or TENTHS tenths of a second passed, default
# 600) prints the log to stderr, stops the process and returns 1.
wait_for_server_port() {
  local log=$1 pid=$2 name=$3 tenths=${4:-600} port=""
  for _ in $(seq 1 "$tenths"); do
    port=$(sed -n 's/.*serving gRPC on [^ ]*:\([0-9][0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$port" ]; then
    echo "$name: the server did not start:" >&2
    cat "$log" >&2
    kill -TERM "$pid" 2>/dev/null
    return 1
  fi
  echo "$port"
}
