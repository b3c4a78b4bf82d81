// matserve-bench's time series: requests counted in the second they finished (failures too),
// empty seconds kept, the last partial second's rate over its length, per-second percentiles
// of the successful requests only.
#include "client/bench/timeseries.h"

#include <gtest/gtest.h>

#include <vector>

namespace matserve::client::bench {
namespace {

TEST(PerSecond, CountsEachRequestInTheSecondItFinished) {
  const std::vector<Completion> done = {
      {0.1, 100, true}, {0.9, 300, true}, {0.95, 0, false}, {2.2, 50, true}, {2.4, 70, true}};
  const std::vector<SecondFigures> s = per_second(done, 2.5);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].second, 0);
  EXPECT_EQ(s[0].completed, 3);
  EXPECT_EQ(s[0].errors, 1);
  EXPECT_DOUBLE_EQ(s[0].rate_per_s, 3);
  EXPECT_EQ(s[0].p50_us, 100);  // the failure's time is not a latency
  EXPECT_EQ(s[0].p99_us, 300);
  EXPECT_EQ(s[1].completed, 0);  // an empty second is still a row
  EXPECT_EQ(s[1].p50_us, 0);
  EXPECT_EQ(s[2].completed, 2);
  EXPECT_DOUBLE_EQ(s[2].rate_per_s, 4);  // 2 requests in the run's last half second
  std::int64_t total = 0;
  for (const SecondFigures& f : s) total += f.completed;
  EXPECT_EQ(total, 5);
}

TEST(PerSecond, ANoRequestRunIsOneEmptySecond) {
  const std::vector<SecondFigures> s = per_second({}, 0.3);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].completed, 0);
}

}  // namespace
}  // namespace matserve::client::bench
