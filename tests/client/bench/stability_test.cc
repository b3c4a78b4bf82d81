// matserve-bench's stability windows: the decision over the last N windows (throughput and the
// chosen latency percentile each within P% of their mean), the spread it reports, and the
// collector that turns the requests of a window into its figures.
#include "client/bench/stability.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace matserve::client::bench {
namespace {

WindowFigures window(double throughput, double latency_us, std::int64_t ok = 100) {
  WindowFigures w;
  w.throughput = throughput;
  w.latency_us = latency_us;
  w.ok = ok;
  w.requests = ok;
  return w;
}

TEST(IsStable, NeedsTheLastNWindowsWithinThePercentOfTheirMean) {
  // Mean 100: 95 and 105 are 5% off.
  const std::vector<WindowFigures> steady = {window(95, 10), window(100, 10), window(105, 10)};
  EXPECT_TRUE(is_stable(steady, 3, 10));
  EXPECT_TRUE(is_stable(steady, 3, 5));
  EXPECT_FALSE(is_stable(steady, 3, 4.9));
  EXPECT_DOUBLE_EQ(window_spread(steady, 3), 5);
}

TEST(IsStable, LatencyCountsAsMuchAsThroughput) {
  const std::vector<WindowFigures> w = {window(100, 80), window(100, 100), window(100, 120)};
  EXPECT_DOUBLE_EQ(window_spread(w, 3), 20);
  EXPECT_FALSE(is_stable(w, 3, 10));
  EXPECT_TRUE(is_stable(w, 3, 20));
}

TEST(IsStable, OnlyTheLastWindowsCountAndThereMustBeEnough) {
  std::vector<WindowFigures> w = {window(10, 500), window(100, 10)};
  EXPECT_FALSE(is_stable(w, 3, 10));  // two windows of three
  w.push_back(window(101, 10));
  EXPECT_FALSE(is_stable(w, 3, 10));  // the slow first window is among the last three
  w.push_back(window(99, 10));
  EXPECT_TRUE(is_stable(w, 3, 10));  // it has dropped out
  EXPECT_FALSE(is_stable(w, 4, 10));
  EXPECT_EQ(window_spread({}, 3), 0);
}

TEST(IsStable, AWindowWithoutASuccessfulRequestIsNeverStable) {
  const std::vector<WindowFigures> idle = {window(0, 0, 0), window(0, 0, 0), window(0, 0, 0)};
  EXPECT_DOUBLE_EQ(window_spread(idle, 3), 0);
  EXPECT_FALSE(is_stable(idle, 3, 10));
}

TEST(WindowCollector, CloseGivesTheWindowsFiguresAndStartsAnew) {
  WindowCollector collector;
  for (int i = 1; i <= 100; ++i) collector.add(i, true);
  collector.add(1e6, false);  // a failure counts as a request, not as a latency
  const WindowFigures first = collector.close(1, 0.5, 50);
  EXPECT_EQ(first.index, 1);
  EXPECT_EQ(first.ok, 100);
  EXPECT_EQ(first.errors, 1);
  EXPECT_EQ(first.requests, 101);
  EXPECT_DOUBLE_EQ(first.throughput, 202);
  EXPECT_EQ(first.latency_us, 50);
  EXPECT_EQ(first.p99_us, 99);
  collector.add(7, true);
  const WindowFigures second = collector.close(2, 1, 90);
  EXPECT_EQ(second.requests, 1);
  EXPECT_EQ(second.latency_us, 7);
}

TEST(StabilityJson, NullWithoutWindowsAndTheWindowsWithThem) {
  EXPECT_EQ(stability_json(StabilityResult{}), "null");
  StabilityResult r;
  r.options.window_ms = 500;
  r.stable = true;
  r.windows = {window(100, 10), window(100, 10), window(100, 10)};
  const std::string json = stability_json(r);
  EXPECT_NE(json.find("\"window_ms\": 500"), std::string::npos) << json;
  EXPECT_NE(json.find("\"stable\": true"), std::string::npos) << json;
  EXPECT_NE(json.find("\"spread_pct\": 0"), std::string::npos) << json;
  EXPECT_EQ(window_line(r.windows[0], 50, 0, true).find("window 0: 100 requests"), 0u);
}

}  // namespace
}  // namespace matserve::client::bench
