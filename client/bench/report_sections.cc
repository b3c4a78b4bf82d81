// The parts of matserve-bench's text report below the main table: per-operation figures of runs
// that mix operations or transpose, and how each windowed run ended (see report.h).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "client/bench/report.h"

namespace matserve::client::bench {

void print_sections(std::ostream& out, const std::vector<RunReport>& runs) {
  const bool any_ops = std::any_of(runs.begin(), runs.end(), [](const RunReport& r) {
    return r.ops.size() > 1 || (r.ops.size() == 1 && r.ops.front().name != "multiply");
  });
  if (any_ops) {
    out << "\nper operation:\n"
        << absl::StrFormat("%4s  %-10s %9s %7s %10s %10s %10s %10s\n", "run", "operation",
                           "requests", "errors", "req/s", "p50 us", "p99 us", "share%");
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const RunReport& r = runs[i];
      for (const OpReport& op : r.ops) {
        out << absl::StrFormat(
            "%4d  %-10s %9d %7d %10.2f %10.1f %10.1f %10.1f\n", i + 1, op.name, op.requests,
            op.errors, op.requests_per_s, op.client_us.p50, op.client_us.p99,
            r.requests > 0
                ? 100.0 * static_cast<double>(op.requests) / static_cast<double>(r.requests)
                : 0.0);
      }
    }
  }
  bool header = false;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const StabilityResult& s = runs[i].stability;
    if (s.options.window_ms <= 0) continue;
    if (!header) out << "\nstability (windows of the run; the last ones compared):\n";
    header = true;
    const double spread = window_spread(s.windows, s.options.windows);
    out << absl::StrFormat(
        "%4d  %s after %d windows of %g ms: throughput and p%g within %s%% over the last %d "
        "(limit %g%%)\n",
        i + 1, s.stable ? "stable" : "NOT STABLE", s.windows.size(), s.options.window_ms,
        s.options.percentile, std::isfinite(spread) ? absl::StrFormat("%.1f", spread) : "inf",
        std::min<int>(s.options.windows, static_cast<int>(s.windows.size())), s.options.pct);
  }
}

}  // namespace matserve::client::bench
