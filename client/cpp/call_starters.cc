// A few threads that start calls on a caller's behalf: see call_starters.h.
#include "client/cpp/call_starters.h"

#include <utility>

namespace matserve::client {

CallStarters::CallStarters(std::size_t threads) {
  threads_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

CallStarters::~CallStarters() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void CallStarters::post(std::function<void()> task) {
  if (threads_.empty()) {
    task();
    return;
  }
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void CallStarters::work() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CallStarters* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->tasks_.empty();
          },
          this));
      if (tasks_.empty()) return;  // stopping, nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace matserve::client
