# Sourced by the benchmark drivers whose client is the Python one: finds the server and the Python
# stubs. usage: resolve_python_client BUNDLE_DIR || exit 1
# With a bundle from scripts/device/bundle.sh the server runs through BUNDLE_DIR/with-env.sh and the
# stubs are its python/ (MATSERVE_PYTHON_STUBS overrides them); the client runs through
# with-env.sh too, as the compiled data plane in the stubs' folder needs the bundle's libraries.
# Without one, MATSERVE_SERVER and MATSERVE_PYTHON_STUBS name them (e.g. a CPU build with
# MATSERVE_BACKEND=cpu). Sets the arrays server_cmd and client_env and the variable stubs.
resolve_python_client() {
  local bundle=$1
  if [ -x "$bundle/with-env.sh" ] && [ -z "${MATSERVE_SERVER:-}" ]; then
    "$bundle/with-env.sh" true || return 1
    server_cmd=("$bundle/with-env.sh" matserve)
    stubs=${MATSERVE_PYTHON_STUBS:-$bundle/python}
    client_env=("$bundle/with-env.sh")
  else
    : "${MATSERVE_SERVER:?no bundle at $bundle: set MATSERVE_SERVER (and MATSERVE_PYTHON_STUBS)}"
    server_cmd=("$MATSERVE_SERVER")
    stubs=${MATSERVE_PYTHON_STUBS:?set MATSERVE_PYTHON_STUBS to <build>/python}
    client_env=()
  fi
}
