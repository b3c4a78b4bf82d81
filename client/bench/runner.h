// One load-test run: `concurrency` worker threads in a closed loop (each sends its next Multiply,
// MultiplyBatched with a batch, or Transpose as the --workload mix draws, as soon as the previous
// returns) or an open one, warm-up excluded, stopped by a total request count, a duration or
// (--window-ms) stable windows, with optional progress on stderr; every worker's record merged
// at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "client/bench/operands.h"
#include "client/bench/options.h"
#include "client/bench/stability.h"
#include "client/bench/stats.h"
#include "client/cpp/client.h"

namespace matserve::client::bench {

struct RunSpec {
  Shape shape;
  Mode mode = Mode::kInline;
  std::string variant = "auto";
  std::string precision = "fp32";
  int concurrency = 1;
  std::int64_t batch = 1;  // products per request (> 1: MultiplyBatched); 1 for ping
};

struct RunResult {
  RunSpec spec;
  Recorder record;                          // every worker's timed requests, merged
  double wall_s = 0;                        // first timed request started -> last one finished
  double start_unix_s = 0;                  // wall-clock time the timed window opened
  std::int64_t bytes_sent_per_request = 0;  // operand bytes in each request (0 when resident)
  std::int64_t bytes_received_per_request = 0;
  std::int64_t setup_failures = 0;     // workers whose setup (connect, upload) failed
  std::optional<double> offered_rate;  // --rate: requests/s offered (open loop)
  bool poisson_arrivals = true;
  std::string workload = "multiply";  // --workload's name ("-" for ping runs)
  StabilityResult stability;          // --window-ms: the windows and whether they became stable
};

// What every run shares: the options and, unless --client per-worker, one Client.
struct RunContext {
  const BenchOptions& options;
  Client* shared_client = nullptr;      // null with --client per-worker
  bool show_progress = false;           // live line on stderr
  std::string label;                    // "[3/12] 256x256x256 inline auto fp32 c=8"
  const FileOperands* files = nullptr;  // --a-npy / --b-npy: every worker sends these operands
};

RunResult run_one(const RunContext& context, const RunSpec& spec);

}  // namespace matserve::client::bench
