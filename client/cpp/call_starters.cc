// A few threads that start calls on a caller's behalf: see call_starters.h.
#include "client/cpp/call_starters.h"

#include <utility>

namespace matserve::client {

CallStarters::CallStarters(std::size_t threads) : wanted_(threads) {}

CallStarters::~CallStarters() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void CallStarters::post(std::function<void()> task) {
  if (wanted_ == 0) {
    task();
    return;
  }
  absl::MutexLock lock(&mu_);
  // The threads wait for mu_, which is held until the task is queued.
  while (threads_.size() < wanted_) threads_.emplace_back([this] { work(); });
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
