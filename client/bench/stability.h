// Measurement windows, as perf_analyzer keeps them: a run is cut into windows of --window-ms and
// goes on until the last N windows' throughput and latency percentile are each within P% of
// their mean over those windows (stable), or --max-trials windows have passed (not stable).
// The decision is a pure function; the collector is what workers feed while the run goes on.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace matserve::client::bench {

struct StabilityOptions {
  double window_ms = 0;    // 0: no windows (the run stops by --requests / --duration)
  double pct = 10;         // --stability-pct
  int windows = 3;         // --stability-windows: how many of the last windows must agree
  int max_trials = 10;     // --max-trials: windows at most
  double percentile = 50;  // --stability-percentile: the latency percentile compared
};

// What one window measured.
struct WindowFigures {
  int index = 0;  // 1-based
  double seconds = 0;
  std::int64_t requests = 0, ok = 0, errors = 0;
  double throughput = 0;  // completed requests / seconds
  double latency_us = 0;  // the chosen percentile of the window's successful round trips
  double p99_us = 0;
};

// True when the last `count` windows exist, each completed a request, and each one's throughput
// and latency are within `pct` percent of the mean of those `count` windows.
bool is_stable(const std::vector<WindowFigures>& windows, int count, double pct);

// The largest deviation, in percent of the mean, of throughput or latency over the last `count`
// windows (fewer when fewer exist); 0 for none.
double window_spread(const std::vector<WindowFigures>& windows, int count);

// The windows of one run and how it ended.
struct StabilityResult {
  StabilityOptions options;
  bool stable = false;
  std::vector<WindowFigures> windows;
};

// Workers add each completed timed request; the monitor closes a window every window_ms. Safe to
// call from any thread.
class WindowCollector {
 public:
  void add(double client_us, bool ok);
  // The figures of the requests added since the last Close, over `seconds`.
  WindowFigures close(int index, double seconds, double percentile);

 private:
  std::mutex mu_;
  std::vector<double> latencies_;  // successful requests of the open window
  std::int64_t errors_ = 0;
};

// One progress line: "window 3: 1234.5 req/s, p50 456.7 us, spread 4.2% (stable)".
std::string window_line(const WindowFigures& w, double percentile, double spread, bool stable);

// The "stability" object of a run's JSON.
std::string stability_json(const StabilityResult& result);

}  // namespace matserve::client::bench
