// Per-run exports of matserve-bench: the client latency histogram (log-spaced buckets, 20 per
// decade, so 12% wide: fine enough for the 50-1000 us region of small requests) and the per-second
// time series (completed, errors, achieved rate, p50 and p99 of each second), as CSV rows people
// plot, one block of rows per run, each row starting with the run's label.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "client/bench/stats.h"

namespace matserve::client::bench {

struct HistogramBucket {
  double upper_us = 0;  // the bucket holds values in (previous upper, upper_us]
  std::int64_t count = 0;
};

// Log-spaced buckets, `per_decade` per factor of 10, from the one holding the smallest value to
// the one holding the largest; empty buckets between are kept (so the rows plot as a histogram).
// Values <= 0 count in the first bucket. Empty input: no buckets.
std::vector<HistogramBucket> LogHistogram(const std::vector<double>& values_us,
                                          int per_decade = 20);

struct SecondFigures {
  std::int64_t second = 0;  // [second, second + 1) after the timed window opened
  std::int64_t completed = 0, errors = 0;
  double p50_us = 0, p99_us = 0;  // of the requests that succeeded in that second (0 if none)
};

// The record's requests by the second they finished in (Recorder::ok_at_s / error_at_s; its
// client_us must still be in recording order, i.e. before Summarize sorted it), from second 0 to
// the last one with a request.
std::vector<SecondFigures> PerSecond(const Recorder& record);

void WriteHistogramCsvHeader(std::ostream& out);
void WriteHistogramCsv(std::ostream& out, const std::string& run,
                       const std::vector<HistogramBucket>& buckets);
void WriteTimeSeriesCsvHeader(std::ostream& out);
void WriteTimeSeriesCsv(std::ostream& out, const std::string& run,
                        const std::vector<SecondFigures>& seconds);

}  // namespace matserve::client::bench
