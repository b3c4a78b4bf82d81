// Cancels a streaming call that makes no progress for a while. gRPC's synchronous Read() and
// Write() have no timeout of their own: without this, a client that sends an UploadStream header
// and then nothing (or stops reading a DownloadStream) would hold the memory of its matrix, and
// the matrix's lock, for as long as it kept the connection open. One thread per armed timer; an
// idle time of zero arms nothing.
#pragma once

#include <grpcpp/server_context.h>

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace matserve::server {

class StreamIdleTimer {
 public:
  // Cancels `context` (TryCancel: pending and later reads and writes fail) once `idle` passes
  // without a touch().
  StreamIdleTimer(grpc::ServerContext& context, absl::Duration idle);
  ~StreamIdleTimer();
  StreamIdleTimer(const StreamIdleTimer&) = delete;
  StreamIdleTimer& operator=(const StreamIdleTimer&) = delete;

  // A chunk arrived or left: the idle time starts again.
  void touch();
  // Whether the timer cancelled the call.
  bool fired() const;

 private:
  void run();

  grpc::ServerContext& context_;
  const absl::Duration idle_;
  mutable absl::Mutex mu_;
  absl::Time last_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace matserve::server
