// Host memory copies split across a small pool of threads. One thread's memcpy (about 10 GB/s)
// cannot keep up with pinned PCIe transfers (about 54 GB/s); staging request bytes into pinned
// buffers in parallel lets the copy into staging overlap with, and keep pace with, the DMA.
// for_each() hands out the chunks of one transfer to the caller and the helpers, one wake-up per
// transfer, so each thread copies whole chunks and issues their DMA itself.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace matserve::server {

class ParallelCopier {
 public:
  // `threads` helpers (0: copies run on the caller only).
  explicit ParallelCopier(int threads);
  ~ParallelCopier();
  ParallelCopier(const ParallelCopier&) = delete;
  ParallelCopier& operator=(const ParallelCopier&) = delete;

  // Runs fn(0) .. fn(count - 1), each exactly once, on the caller and at most `max_helpers`
  // helpers; indices are claimed in increasing order. Returns when every call has returned.
  // Without helpers (a small transfer) it is a plain loop on the caller: nothing is allocated.
  void for_each(std::size_t count, std::size_t max_helpers,
                const std::function<void(std::size_t)>& fn);

  std::size_t helpers() const { return threads_.size(); }

 private:
  void worker();
  bool has_work() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !tasks_.empty(); }

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace matserve::server
