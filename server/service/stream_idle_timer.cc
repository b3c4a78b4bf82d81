// Idle timer of streaming calls: see stream_idle_timer.h.
#include "server/service/stream_idle_timer.h"

#include "absl/time/clock.h"

namespace matserve::server {

StreamIdleTimer::StreamIdleTimer(grpc::ServerContext& context, absl::Duration idle)
    : context_(context), idle_(idle), last_(absl::Now()) {
  if (idle_ > absl::ZeroDuration()) thread_ = std::thread([this] { run(); });
}

StreamIdleTimer::~StreamIdleTimer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void StreamIdleTimer::touch() {
  absl::MutexLock lock(&mu_);
  last_ = absl::Now();
}

bool StreamIdleTimer::fired() const {
  absl::MutexLock lock(&mu_);
  return fired_;
}

void StreamIdleTimer::run() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time due = last_ + idle_;
    if (absl::Now() >= due) {
      fired_ = true;
      context_.TryCancel();
      return;
    }
    mu_.AwaitWithDeadline(absl::Condition(&stop_), due);
  }
}

}  // namespace matserve::server
