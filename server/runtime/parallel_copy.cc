// Parallel host copies: see parallel_copy.h.
#include "server/runtime/parallel_copy.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace matserve::server {

ParallelCopier::ParallelCopier(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { worker(); });
}

ParallelCopier::~ParallelCopier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void ParallelCopier::worker() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &ParallelCopier::has_work));
      if (tasks_.empty()) return;  // stopping
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

namespace {

// One for_each call, shared with the helper tasks: a helper that starts after every index was
// claimed finds nothing to do and never touches the caller's function.
struct ForEach {
  std::size_t count = 0;
  const std::function<void(std::size_t)>* fn = nullptr;
  std::atomic<std::size_t> next{0};
  absl::Mutex mu;
  std::size_t completed ABSL_GUARDED_BY(mu) = 0;

  void run() {
    std::size_t done = 0;
    for (std::size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      (*fn)(i);
      ++done;
    }
    if (done > 0) {
      absl::MutexLock lock(&mu);
      completed += done;
    }
  }
  bool all_done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return completed == count; }
};

}  // namespace

void ParallelCopier::for_each(std::size_t count, std::size_t max_helpers,
                              const std::function<void(std::size_t)>& fn) {
  if (count == 0) return;
  const std::size_t helpers = std::min({max_helpers, threads_.size(), count - 1});
  if (helpers == 0) {
    for (std::size_t i = 0; i < count; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<ForEach>();
  job->count = count;
  job->fn = &fn;
  {
    absl::MutexLock lock(&mu_);
    for (std::size_t i = 0; i < helpers; ++i) tasks_.emplace_back([job] { job->run(); });
  }
  job->run();
  absl::MutexLock lock(&job->mu);
  job->mu.Await(absl::Condition(job.get(), &ForEach::all_done));
}

}  // namespace matserve::server
