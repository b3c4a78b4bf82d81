// The stability criterion: see stability.h.
#include "client/bench/stability.h"

#include <cmath>
#include <cstddef>

namespace matserve::client::bench {
namespace {

// Whether every value of field `get` in the last n windows is within pct % of their mean.
template <typename Get>
bool WithinOfMean(const std::vector<WindowFigures>& windows, std::size_t n, double pct, Get get) {
  double mean = 0;
  for (std::size_t i = windows.size() - n; i < windows.size(); ++i) mean += get(windows[i]);
  mean /= static_cast<double>(n);
  for (std::size_t i = windows.size() - n; i < windows.size(); ++i) {
    if (std::abs(get(windows[i]) - mean) > pct / 100.0 * std::abs(mean)) return false;
  }
  return true;
}

}  // namespace

bool IsStable(const std::vector<WindowFigures>& windows, int n, double pct) {
  if (n < 1 || windows.size() < static_cast<std::size_t>(n)) return false;
  const auto count = static_cast<std::size_t>(n);
  return WithinOfMean(windows, count, pct,
                      [](const WindowFigures& w) { return w.requests_per_s; }) &&
         WithinOfMean(windows, count, pct, [](const WindowFigures& w) { return w.p50_us; });
}

}  // namespace matserve::client::bench
