// When a load test has settled, as perf_analyzer decides it: a run is measured in trials (windows)
// of its stop condition, and it is stable once the last N windows' throughput and median latency
// each lie within a given percentage of their mean over those N windows.
#pragma once

#include <vector>

namespace matserve::client::bench {

// What one window measured.
struct WindowFigures {
  double requests_per_s = 0;
  double p50_us = 0;
};

// True when `windows` has at least `n` (>= 1) entries and the last n's requests_per_s and p50_us
// are each within `pct` percent of their own mean over those n (a mean of 0 needs all values 0).
bool IsStable(const std::vector<WindowFigures>& windows, int n, double pct);

}  // namespace matserve::client::bench
