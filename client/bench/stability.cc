// The window stability decision, the live window collector, and their text (see stability.h).
#include "client/bench/stability.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/bench/stats.h"

namespace matserve::client::bench {
namespace {

// The largest |x - mean| / mean in percent of `get` over windows [first, end); 0 when the mean
// is 0 and every value is too, infinite when only the mean is 0.
template <typename Get>
double deviation(const std::vector<WindowFigures>& w, std::size_t first, Get get) {
  double mean = 0;
  for (std::size_t i = first; i < w.size(); ++i) mean += get(w[i]);
  mean /= static_cast<double>(w.size() - first);
  double worst = 0;
  for (std::size_t i = first; i < w.size(); ++i) {
    const double off = std::abs(get(w[i]) - mean);
    if (off == 0) continue;
    worst = std::max(worst, mean > 0 ? 100 * off / mean : INFINITY);
  }
  return worst;
}

}  // namespace

double window_spread(const std::vector<WindowFigures>& windows, int count) {
  if (windows.empty() || count < 1) return 0;
  const std::size_t first = windows.size() - std::min<std::size_t>(windows.size(), count);
  return std::max(deviation(windows, first, [](const WindowFigures& f) { return f.throughput; }),
                  deviation(windows, first, [](const WindowFigures& f) { return f.latency_us; }));
}

bool is_stable(const std::vector<WindowFigures>& windows, int count, double pct) {
  if (count < 1 || windows.size() < static_cast<std::size_t>(count)) return false;
  for (std::size_t i = windows.size() - count; i < windows.size(); ++i) {
    if (windows[i].ok == 0) return false;
  }
  return window_spread(windows, count) <= pct;
}

void WindowCollector::add(double client_us, bool ok) {
  std::lock_guard lock(mu_);
  if (ok) {
    latencies_.push_back(client_us);
  } else {
    ++errors_;
  }
}

WindowFigures WindowCollector::close(int index, double seconds, double percentile) {
  std::vector<double> latencies;
  WindowFigures f;
  {
    std::lock_guard lock(mu_);
    latencies.swap(latencies_);
    f.errors = std::exchange(errors_, 0);
  }
  std::sort(latencies.begin(), latencies.end());
  f.index = index;
  f.seconds = seconds;
  f.ok = static_cast<std::int64_t>(latencies.size());
  f.requests = f.ok + f.errors;
  f.throughput = seconds > 0 ? static_cast<double>(f.requests) / seconds : 0;
  f.latency_us = nearest_rank(latencies, percentile);
  f.p99_us = nearest_rank(latencies, 99);
  return f;
}

std::string window_line(const WindowFigures& w, double percentile, double spread, bool stable) {
  return absl::StrFormat(
      "window %d: %lld requests, %.1f req/s, p%g %.1f us, %lld errors, "
      "spread %.1f%%%s",
      w.index, static_cast<long long>(w.requests), w.throughput, percentile, w.latency_us,
      static_cast<long long>(w.errors), spread, stable ? " (stable)" : "");
}

std::string stability_json(const StabilityResult& r) {
  if (r.options.window_ms <= 0) return "null";
  const StabilityOptions& o = r.options;
  std::string out = absl::StrFormat(
      "{\"window_ms\": %g, \"stability_pct\": %g, \"stability_windows\": %d, \"max_trials\": %d, "
      "\"percentile\": %g, \"stable\": %s, \"spread_pct\": %s, \"windows\": [",
      o.window_ms, o.pct, o.windows, o.max_trials, o.percentile, r.stable ? "true" : "false",
      std::isfinite(window_spread(r.windows, o.windows))
          ? absl::StrFormat("%.6g", window_spread(r.windows, o.windows))
          : "null");
  for (std::size_t i = 0; i < r.windows.size(); ++i) {
    const WindowFigures& w = r.windows[i];
    absl::StrAppendFormat(&out,
                          "%s{\"index\": %d, \"seconds\": %.6g, \"requests\": %lld, \"ok\": %lld, "
                          "\"errors\": %lld, \"throughput\": %.6g, \"latency_us\": %.6g, "
                          "\"p99_us\": %.6g}",
                          i ? ", " : "", w.index, w.seconds, static_cast<long long>(w.requests),
                          static_cast<long long>(w.ok), static_cast<long long>(w.errors),
                          w.throughput, w.latency_us, w.p99_us);
  }
  return out + "]}";
}

}  // namespace matserve::client::bench
