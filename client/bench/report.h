// matserve-bench's reports: the figures derived from a run (percentiles of each time, throughput
// in requests and in products, server overhead, effective host-to-device rate, device-busy lower
// bound, dynamic batching) and their renderings as a text table, a Markdown table, JSON (runs +
// command line + server info) and CSV.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "client/bench/runner.h"
#include "client/bench/stability.h"
#include "client/bench/stats.h"
#include "client/bench/timeseries.h"

namespace matserve::client::bench {

struct ServerDescription {
  std::string target, backend, version, git_sha;
  std::vector<std::string> devices;  // "cuda:0 NVIDIA H100 80GB HBM3", ...
};

// The requests of one operation of a run's --workload.
struct OpReport {
  std::string name;  // "multiply", "transpose"
  std::int64_t requests = 0, ok = 0, errors = 0;
  double requests_per_s = 0;
  Summary client_us;
};

struct RunReport {
  RunSpec spec;
  std::int64_t requests = 0, ok = 0, errors = 0, setup_failures = 0, release_errors = 0;
  std::map<std::string, std::int64_t> errors_by_code, variants, precisions, devices_ran;
  std::string first_error;
  double wall_s = 0, requests_per_s = 0, ok_per_s = 0, gflops_per_s = 0;
  std::optional<double> offered_rate;  // open loop (--rate): requests/s offered; else closed loop
  bool poisson_arrivals = true;
  // Products computed per second: ok_per_s x batch (0 for ping).
  double matrices_per_s = 0;
  double start_unix_s = 0;  // the timed window: [start_unix_s, start_unix_s + wall_s]
  Summary client_us, server_total_us, kernel_us, overhead_us, queue_us, h2d_us, d2h_us, release_us;
  // Timing.merged_requests (its mean: requests per launch as the replies saw it; count 0 when the
  // server reported none) and Timing.batch_wait_us of the successful replies.
  Summary merged_requests, batch_wait_us;
  std::int64_t bytes_sent_per_request = 0, bytes_received_per_request = 0;
  double h2d_gb_per_s = 0;  // bytes sent per request / median host_to_device_us; 0 when none
  int devices = 1;
  double device_busy = 0;     // sum(kernel_us) / (wall time * devices): a lower bound on GPU busy
  std::string workload;       // "multiply", "multiply=0.8,transpose=0.2"; "-" for ping
  std::vector<OpReport> ops;  // per operation, in name order (none for ping)
  StabilityResult stability;  // --window-ms
  std::vector<std::int64_t> histogram;  // client_us of successful requests, histogram.h buckets
  std::vector<SecondFigures> seconds;   // the run second by second (timeseries.h)
};

// Derives the report of a run on a server with `devices` devices (sorts the record's samples).
RunReport make_report(RunResult result, int devices);

void print_table(std::ostream& out, const std::vector<RunReport>& runs);
void print_markdown(std::ostream& out, const std::vector<RunReport>& runs,
                    const ServerDescription& server);
void write_json(std::ostream& out, const std::vector<RunReport>& runs,
                const ServerDescription& server, const std::string& command_line,
                const std::string& client_mode);
void write_csv(std::ostream& out, const std::vector<RunReport>& runs);

// After the table: one row per operation of every run with a --workload mix or transposes, and
// how each windowed run ended; nothing when no run has either.
void print_sections(std::ostream& out, const std::vector<RunReport>& runs);

// JSON of a Summary ({"count": .., "min": .., ..}) and of a run's operations ({"multiply": ..}).
std::string summary_json(const Summary& s);
std::string operations_json(const std::vector<OpReport>& ops);

// A JSON string literal body (quotes, backslashes and control characters escaped).
std::string json_escape(const std::string& s);

}  // namespace matserve::client::bench
