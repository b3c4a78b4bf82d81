// matserve-bench's per-run exports: log-spaced latency buckets (20 per decade, empty ones kept,
// every sample counted once) and the per-second series (requests by the second they finished in,
// each second's percentiles from its own requests), and their CSV rows.
#include "client/bench/run_exports.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <sstream>
#include <vector>

namespace matserve::client::bench {
namespace {

TEST(LogHistogramTest, CountsEverySampleOnceInLogBuckets) {
  const std::vector<double> us = {100, 100, 105, 150, 1000, 1001};
  const std::vector<HistogramBucket> b = LogHistogram(us, 20);
  ASSERT_FALSE(b.empty());
  EXPECT_NEAR(b.front().upper_us, 100, 1e-9);  // 100 sits on a bucket's upper edge
  EXPECT_EQ(b.front().count, 2);
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), std::int64_t{0},
                            [](std::int64_t n, const HistogramBucket& x) { return n + x.count; }),
            6);
  for (std::size_t i = 1; i < b.size(); ++i) {
    EXPECT_NEAR(b[i].upper_us / b[i - 1].upper_us, std::pow(10.0, 1.0 / 20), 1e-9);
  }
  EXPECT_EQ(b.size(), 22u);  // (100, 1122] in 21 steps of 12.2%, plus the bucket holding 1001
  EXPECT_GE(b.back().upper_us, 1001);
  EXPECT_TRUE(LogHistogram({}).empty());
}

TEST(PerSecondTest, GroupsRequestsByTheSecondTheyFinished) {
  Recorder r;
  r.client_us = {10, 30, 20, 500};
  r.ok_at_s = {0.1, 0.5, 0.9, 2.2};
  r.error_at_s = {1.5, 2.9};
  const std::vector<SecondFigures> s = PerSecond(r);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].completed, 3);
  EXPECT_EQ(s[0].errors, 0);
  EXPECT_EQ(s[0].p50_us, 20);
  EXPECT_EQ(s[0].p99_us, 30);
  EXPECT_EQ(s[1].completed, 0);
  EXPECT_EQ(s[1].errors, 1);
  EXPECT_EQ(s[1].p50_us, 0);
  EXPECT_EQ(s[2].completed, 1);
  EXPECT_EQ(s[2].errors, 1);
  EXPECT_EQ(s[2].p99_us, 500);
  std::ostringstream csv;
  WriteTimeSeriesCsvHeader(csv);
  WriteTimeSeriesCsv(csv, "run a", s);
  EXPECT_EQ(csv.str(),
            "run,second,completed,errors,requests_per_s,p50_us,p99_us\n"
            "run a,0,3,0,3,20,30\nrun a,1,0,1,1,0,0\nrun a,2,1,1,2,500,500\n");
}

}  // namespace
}  // namespace matserve::client::bench
