// matserve-bench's stability criterion: settled only when the last N windows' req/s and p50 are
// each within the percentage of their mean, and never with fewer than N windows.
#include "client/bench/stability.h"

#include <gtest/gtest.h>

#include <vector>

#include "client/bench/options.h"

namespace matserve::client::bench {
namespace {

TEST(StabilityTest, NeedsNWindows) {
  EXPECT_FALSE(IsStable({}, 3, 10));
  EXPECT_FALSE(IsStable({{100, 50}, {100, 50}}, 3, 10));
  EXPECT_TRUE(IsStable({{100, 50}, {100, 50}, {100, 50}}, 3, 10));
  EXPECT_FALSE(IsStable({{100, 50}}, 0, 10));
}

TEST(StabilityTest, OnlyTheLastNWindowsCount) {
  // A slow first window (warming caches) does not keep the run from settling.
  const std::vector<WindowFigures> w = {{10, 900}, {100, 50}, {104, 52}, {97, 49}};
  EXPECT_TRUE(IsStable(w, 3, 10));
  EXPECT_FALSE(IsStable(w, 4, 10));
}

TEST(StabilityTest, EitherFigureOutsideThePercentageFails) {
  // Mean rate 100: 89 is 11% off. Mean p50 50: 56 is 12% off.
  EXPECT_FALSE(IsStable({{89, 50}, {100, 50}, {111, 50}}, 3, 10));
  EXPECT_TRUE(IsStable({{89, 50}, {100, 50}, {111, 50}}, 3, 12));
  EXPECT_FALSE(IsStable({{100, 44}, {100, 50}, {100, 56}}, 3, 10));
  EXPECT_TRUE(IsStable({{0, 0}, {0, 0}, {0, 0}}, 3, 10));
}

TEST(StabilityOptionsTest, ParsesAndChecksTheStabilityOptions) {
  auto o = ParseOptions({"--stability-windows", "3", "--stability-pct", "5", "--max-trials", "7",
                         "--histogram-out", "h.csv", "--timeseries-out", "t.csv"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->stability_windows, 3);
  EXPECT_EQ(o->stability_pct, 5);
  EXPECT_EQ(o->max_trials, 7);
  EXPECT_EQ(o->histogram_path, "h.csv");
  EXPECT_EQ(o->timeseries_path, "t.csv");
  EXPECT_FALSE(ParseOptions({"--stability-windows", "5", "--max-trials", "4"}).ok());
  EXPECT_FALSE(ParseOptions({"--stability-pct", "0"}).ok());
  EXPECT_FALSE(ParseOptions({"--max-trials", "0"}).ok());
}

}  // namespace
}  // namespace matserve::client::bench
