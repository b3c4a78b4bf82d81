// Process-wide settings a matserve client program makes once, at its start (matserve-cli,
// matserve-bench, grpc-wire-ceiling, the Python client's compiled module). The server makes its
// own (server/main.cc).
#pragma once

namespace matserve::client {

// Turns absl's lock-order (deadlock) detector off for the whole process. Debian and Ubuntu build
// absl with it on: every absl::Mutex acquisition, gRPC's own included, then updates one
// process-wide graph under a global lock, which the striped client's many callback threads
// contend on (an uncontended lock and unlock: 44 ns alone, 442 ns with a second thread busy on
// another mutex; 15 and 56 ns with the detector off, on a 2-core build host).
void turn_off_lock_order_checks();

}  // namespace matserve::client
