// Histogram and per-second exports of a run: see run_exports.h.
#include "client/bench/run_exports.h"

#include <algorithm>
#include <cmath>

namespace matserve::client::bench {
namespace {

// Index of the log bucket holding v: bucket i covers (10^((i-1)/d), 10^(i/d)] microseconds.
std::int64_t BucketOf(double v, int per_decade) {
  if (v <= 1.0) return 0;
  return static_cast<std::int64_t>(std::ceil(std::log10(v) * per_decade - 1e-9));
}

}  // namespace

std::vector<HistogramBucket> LogHistogram(const std::vector<double>& values_us, int per_decade) {
  std::vector<HistogramBucket> out;
  if (values_us.empty() || per_decade < 1) return out;
  std::int64_t lo = BucketOf(values_us.front(), per_decade), hi = lo;
  for (double v : values_us) {
    lo = std::min(lo, BucketOf(v, per_decade));
    hi = std::max(hi, BucketOf(v, per_decade));
  }
  out.resize(static_cast<std::size_t>(hi - lo + 1));
  for (std::int64_t i = lo; i <= hi; ++i) {
    out[static_cast<std::size_t>(i - lo)].upper_us =
        std::pow(10.0, static_cast<double>(i) / per_decade);
  }
  for (double v : values_us) ++out[static_cast<std::size_t>(BucketOf(v, per_decade) - lo)].count;
  return out;
}

std::vector<SecondFigures> PerSecond(const Recorder& record) {
  std::int64_t last = -1;
  auto second_of = [](double at_s) { return static_cast<std::int64_t>(std::max(0.0, at_s)); };
  for (double at : record.ok_at_s) last = std::max(last, second_of(at));
  for (double at : record.error_at_s) last = std::max(last, second_of(at));
  std::vector<SecondFigures> out(static_cast<std::size_t>(last + 1));
  std::vector<std::vector<double>> latencies(out.size());
  for (std::size_t s = 0; s < out.size(); ++s) out[s].second = static_cast<std::int64_t>(s);
  const std::size_t n = std::min(record.ok_at_s.size(), record.client_us.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto s = static_cast<std::size_t>(second_of(record.ok_at_s[i]));
    ++out[s].completed;
    latencies[s].push_back(record.client_us[i]);
  }
  for (double at : record.error_at_s) ++out[static_cast<std::size_t>(second_of(at))].errors;
  for (std::size_t s = 0; s < out.size(); ++s) {
    std::sort(latencies[s].begin(), latencies[s].end());
    out[s].p50_us = NearestRank(latencies[s], 50);
    out[s].p99_us = NearestRank(latencies[s], 99);
  }
  return out;
}

void WriteHistogramCsvHeader(std::ostream& out) {
  out << "run,upper_us,count\n";
}

void WriteHistogramCsv(std::ostream& out, const std::string& run,
                       const std::vector<HistogramBucket>& buckets) {
  for (const HistogramBucket& b : buckets)
    out << run << ',' << b.upper_us << ',' << b.count << '\n';
}

void WriteTimeSeriesCsvHeader(std::ostream& out) {
  out << "run,second,completed,errors,requests_per_s,p50_us,p99_us\n";
}

void WriteTimeSeriesCsv(std::ostream& out, const std::string& run,
                        const std::vector<SecondFigures>& seconds) {
  for (const SecondFigures& s : seconds) {
    out << run << ',' << s.second << ',' << s.completed << ',' << s.errors << ','
        << s.completed + s.errors << ',' << s.p50_us << ',' << s.p99_us << '\n';
  }
}

}  // namespace matserve::client::bench
