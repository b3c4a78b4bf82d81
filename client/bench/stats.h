// Latency statistics of a load-test run: exact samples (a vector per worker, merged at the end;
// sorting a few million doubles is cheap at these request counts), nearest-rank percentiles, and
// the per-worker recorder of client/server times and errors by status code that workers merge.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace matserve::client::bench {

// Nearest-rank percentile of ascending `sorted` values: the smallest value with at least p% of
// the samples <= it, i.e. sorted[ceil(p/100 * N) - 1] (p = 0 gives the minimum, 100 the
// maximum). Always one of the samples, never interpolated. 0 for an empty vector.
double nearest_rank(const std::vector<double>& sorted, double p);

// Order statistics of one quantity over a run.
struct Summary {
  std::int64_t count = 0;
  double min = 0, mean = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
};

// Sorts `values` in place and summarises them.
Summary summarize(std::vector<double>& values);

// One timed request as it finished: seconds since the run's start, round trip, success.
struct Completion {
  double end_s = 0;
  double client_us = 0;
  bool ok = true;
};

// The requests of one operation (a --workload mix reports each).
struct OpRecord {
  std::vector<double> client_us;  // successful requests' round trips
  std::int64_t errors = 0;
  std::int64_t ok() const { return static_cast<std::int64_t>(client_us.size()); }
};

// One worker's record of a run; workers never share one, so recording takes no lock.
struct Recorder {
  std::vector<double> client_us;  // round trip seen by the client, successful requests only
  std::vector<double> server_total_us;
  std::vector<double> kernel_us;
  std::vector<double> overhead_us;  // server total - kernel, per request
  std::vector<double> queue_us;
  std::vector<double> host_to_device_us;
  std::vector<double> device_to_host_us;
  std::vector<double> release_us;  // resident mode: releasing the result (not in client_us)
  // Dynamic batching, per reply that reported it: Timing.merged_requests (requests the server
  // computed in that request's launch) and Timing.batch_wait_us.
  std::vector<double> merged_requests;
  std::vector<double> batch_wait_us;
  std::map<std::string, std::int64_t> errors_by_code;  // "INVALID_ARGUMENT" -> count
  std::map<std::string, std::int64_t> variants;        // variant that ran -> count
  std::map<std::string, std::int64_t> devices;         // device that ran it (reply.device) -> count
  std::map<std::string, std::int64_t> precisions;      // precision that ran -> count
  std::string first_error;                             // "CODE: message" of the first failure
  double kernel_us_sum = 0;  // device kernel time: a launch merged from n requests counts once
  std::int64_t release_errors = 0;      // resident mode: failed releases (not request errors)
  std::map<std::string, OpRecord> ops;  // "multiply", "transpose" -> its requests
  std::vector<Completion> completions;  // every timed request, in the order this worker ended them

  std::int64_t ok() const { return static_cast<std::int64_t>(client_us.size()); }
  std::int64_t errors() const;
  std::int64_t requests() const { return ok() + errors(); }

  // One successful request: its client round trip and the reply's server-side stages.
  // `merged` > 0 (Timing.merged_requests, from a server that reports it): the request shared its
  // launch, and so its kernel time, with merged - 1 others; it counts kernel / merged toward
  // kernel_us_sum. 0 (a ping, an older server): nothing recorded for dynamic batching.
  void record_ok(double client, double total, double kernel, double queue, double h2d, double d2h,
                 int merged = 0, double batch_wait = 0);
  void record_error(const std::string& code, const std::string& message);

  // Adds `other`'s samples and counts to this one (sample vectors are concatenated).
  void merge(const Recorder& other);
};

}  // namespace matserve::client::bench
