// The release pool (see releaser.h): a bounded queue of handles and threads that release them.
#include "client/bench/releaser.h"

#include <chrono>
#include <iterator>

namespace matserve::client::bench {

Releaser::Releaser(Client& client, int threads, std::size_t max_queued)
    : client_(client), max_queued_(max_queued) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

Releaser::~Releaser() {
  Recorder ignored;
  finish(ignored);
}

void Releaser::push(std::vector<std::string> handles) {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return queue_.size() < max_queued_; });
  queue_.push_back(std::move(handles));
  changed_.notify_all();
}

void Releaser::finish(Recorder& record) {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    changed_.notify_all();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  std::lock_guard lock(mu_);
  record.release_us.insert(record.release_us.end(), record_.release_us.begin(),
                           record_.release_us.end());
  record.release_errors += record_.release_errors;
  record_ = Recorder{};
}

void Releaser::loop() {
  for (;;) {
    std::vector<std::string> handles;
    {
      std::unique_lock lock(mu_);
      changed_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closing and drained
      // Everything queued goes in one call (up to kMaxHandlesPerCall): one Release RPC per
      // request would double the RPCs of a resident run and make the release pool, not the
      // multiplies, what a single client process tops out on.
      handles = std::move(queue_.front());
      queue_.pop_front();
      while (!queue_.empty() && handles.size() + queue_.front().size() <= kMaxHandlesPerCall) {
        handles.insert(handles.end(), std::make_move_iterator(queue_.front().begin()),
                       std::make_move_iterator(queue_.front().end()));
        queue_.pop_front();
      }
      changed_.notify_all();
    }
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = client_.release(handles).ok();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lock(mu_);
    record_.release_us.push_back(us);
    if (!ok) ++record_.release_errors;
  }
}

}  // namespace matserve::client::bench
