// A run second by second, for plotting how it went over time: requests completed (and failed)
// in each second since the timed window opened, the achieved rate, and the p50/p99 round trip
// of that second's successful requests. Written as CSV, one row per run and second.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "client/bench/stats.h"

namespace matserve::client::bench {

struct RunReport;

struct SecondFigures {
  std::int64_t second = 0;                 // [second, second + 1) since the start
  std::int64_t completed = 0, errors = 0;  // completed counts failed requests too
  double rate_per_s = 0;                   // completed / the part of the second inside the run
  double p50_us = 0, p99_us = 0;           // nearest-rank, successful requests; 0 when none
};

// Every second from 0 to the one holding `wall_s` (empty ones included), from `completions` in any
// order; the completed counts sum to completions.size().
std::vector<SecondFigures> per_second(const std::vector<Completion>& completions, double wall_s);

// CSV `run,shape,mode,variant,precision,concurrency,second,completed,errors,rate_per_s,p50_us,
// p99_us`.
void write_timeseries_csv(std::ostream& out, const std::vector<RunReport>& runs);

}  // namespace matserve::client::bench
