// Dynamic batching: concurrent Multiply requests of one caller that agree on everything but their
// operands (shape, layouts, options, variant, device) are merged into one batched launch. A request
// waits for company only while earlier launches of its kind are still running, and never longer
// than
// --max_batch_delay_us: a lone request runs at once, as it would without batching. Each request
// gets its own result and its own timing; when a merged launch fails, its requests are run one
// by one, so a request that cannot be served fails alone.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/runtime/device_scheduler.h"
#include "server/runtime/jobs.h"

namespace matserve::server {

struct BatchingOptions {
  int max_batch_size = 0;  // requests per launch; 0 or 1: off
  absl::Duration max_delay = absl::Microseconds(500);
};

class DynamicBatcher {
 public:
  // Computes a merged batch (outcome: the whole launch), or one request alone.
  // `variant` is what the requests asked for (merged requests asked for the same).
  using RunBatch = std::function<absl::Status(const GemmBatchJob&, std::string_view variant,
                                              const Waiter&, Outcome&)>;
  using RunOne = std::function<absl::Status(const GemmJob&, std::string_view variant,
                                            std::span<std::byte>, const Waiter&, Outcome&)>;

  DynamicBatcher(BatchingOptions options, RunBatch run_batch, RunOne run_one);

  bool enabled() const { return options_.max_batch_size > 1; }
  const BatchingOptions& options() const { return options_; }

  // What requests must share to be merged; nullopt when `job` is never merged (batching off, a
  // result in CUDA memory, operands in host memory, or a named variant that computes one product
  // per launch).
  std::optional<std::string> key(const GemmJob& job, std::string_view variant) const;

  // Runs `job` merged with the compatible requests that arrive meanwhile (or alone). `out` as for
  // Runtime::multiply. Sets outcome.merged_requests and times.batch_wait_us.
  absl::Status run(const std::string& key, const GemmJob& job, std::string_view variant,
                   std::span<std::byte> out, const Waiter& waiter, Outcome& outcome);

 private:
  struct Pending {
    const GemmJob* job;
    std::string_view variant;
    std::span<std::byte> out;
    const Waiter* waiter;
    Outcome* outcome;
    absl::Time arrived;
    absl::Status status;
    bool done = false;
  };
  struct Group {
    std::deque<Pending*> open;  // arrived, not yet launched, in arrival order
    bool collecting = false;    // the request at the front is gathering a batch
    int in_flight = 0;          // launches of this group running now
  };

  // Computes `batch` (taken from one group) and fills every member's status and outcome.
  void execute(std::span<Pending* const> batch);

  const BatchingOptions options_;
  const RunBatch run_batch_;
  const RunOne run_one_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Group> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matserve::server
