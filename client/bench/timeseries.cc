// Per-second figures of a run and their CSV (see timeseries.h).
#include "client/bench/timeseries.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "client/bench/report.h"
#include "client/bench/stats.h"

namespace matserve::client::bench {

std::vector<SecondFigures> per_second(const std::vector<Completion>& completions, double wall_s) {
  double last_end = std::max(wall_s, 0.0);
  for (const Completion& c : completions) last_end = std::max(last_end, c.end_s);
  const auto seconds = static_cast<std::size_t>(std::floor(last_end)) + 1;
  std::vector<SecondFigures> out(seconds);
  std::vector<std::vector<double>> latencies(seconds);
  for (const Completion& c : completions) {
    const auto s = static_cast<std::size_t>(std::max(0.0, std::floor(c.end_s)));
    ++out[s].completed;
    if (c.ok) {
      latencies[s].push_back(c.client_us);
    } else {
      ++out[s].errors;
    }
  }
  for (std::size_t s = 0; s < seconds; ++s) {
    SecondFigures& f = out[s];
    f.second = static_cast<std::int64_t>(s);
    const double length = std::clamp(last_end - static_cast<double>(s), 1e-9, 1.0);
    f.rate_per_s = static_cast<double>(f.completed) / length;
    std::sort(latencies[s].begin(), latencies[s].end());
    f.p50_us = nearest_rank(latencies[s], 50);
    f.p99_us = nearest_rank(latencies[s], 99);
  }
  return out;
}

void write_timeseries_csv(std::ostream& out, const std::vector<RunReport>& runs) {
  out << "run,shape,mode,variant,precision,concurrency,second,completed,errors,rate_per_s,p50_us,"
         "p99_us\n";
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const RunReport& run = runs[r];
    for (const SecondFigures& f : run.seconds) {
      out << absl::StrFormat("%d,%s,%s,%s,%s,%d,%d,%d,%d,%.6g,%.6g,%.6g\n", r + 1,
                             run.spec.shape.name(), ModeName(run.spec.mode), run.spec.variant,
                             run.spec.precision, run.spec.concurrency, f.second, f.completed,
                             f.errors, f.rate_per_s, f.p50_us, f.p99_us);
    }
  }
}

}  // namespace matserve::client::bench
