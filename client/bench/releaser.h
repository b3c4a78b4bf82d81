// Releases resident results off the workers' critical path: workers hand each result handle to a
// small pool of threads and go straight on to their next Multiply, so a resident run's closed loop
// (and its requests/s) covers the multiply only. A pool thread releases everything queued in one
// Release call. The queue is bounded: a worker waits when the pool falls behind, so device memory
// held by unreleased results stays bounded.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/bench/stats.h"
#include "client/cpp/client.h"

namespace matserve::client::bench {

class Releaser {
 public:
  // `threads` threads calling Release on `client` (which must outlive this); at most `max_queued`
  // handles wait.
  Releaser(Client& client, int threads, std::size_t max_queued);
  ~Releaser();  // drains the queue and joins
  Releaser(const Releaser&) = delete;
  Releaser& operator=(const Releaser&) = delete;

  // Most handles one Release call carries.
  static constexpr std::size_t kMaxHandlesPerCall = 256;

  // The handles of one request's results (released together, possibly with others queued).
  void push(std::vector<std::string> handles);
  // Drains the queue, joins the threads and adds their release_us / release_errors to `record`.
  void finish(Recorder& record);

 private:
  void loop();

  Client& client_;
  std::size_t max_queued_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::vector<std::string>> queue_;
  bool closing_ = false;
  Recorder record_;  // release_us and release_errors only; guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace matserve::client::bench
