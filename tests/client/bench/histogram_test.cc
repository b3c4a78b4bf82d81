// matserve-bench's latency histogram: log-spaced bucket bounds (20 per decade from 1 us, one
// overflow bucket), which bucket a value lands in at and around the bounds, and that counts
// are kept.
#include "client/bench/histogram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

namespace matserve::client::bench {
namespace {

TEST(Histogram, BoundsAreTwentyPerDecadeFromOneMicrosecond) {
  EXPECT_DOUBLE_EQ(bucket_upper_bound(0), 1);
  EXPECT_NEAR(bucket_upper_bound(20), 10, 1e-9);
  EXPECT_NEAR(bucket_upper_bound(60), 1000, 1e-9);
  EXPECT_NEAR(bucket_upper_bound(1) / bucket_upper_bound(0), std::pow(10, 0.05), 1e-12);
  EXPECT_TRUE(std::isinf(bucket_upper_bound(kHistogramBuckets - 1)));
  EXPECT_NEAR(bucket_upper_bound(kHistogramBuckets - 2), 1e8, 1e-3);  // 100 s
}

TEST(Histogram, AValueLandsInTheFirstBucketWhoseBoundHoldsIt) {
  EXPECT_EQ(bucket_index(0), 0);
  EXPECT_EQ(bucket_index(1), 0);
  EXPECT_EQ(bucket_index(1.01), 1);
  EXPECT_EQ(bucket_index(10), 20);  // exactly on a bound: that bucket
  EXPECT_EQ(bucket_index(10.0001), 21);
  EXPECT_EQ(bucket_index(1000), 60);
  EXPECT_EQ(bucket_index(1e9), kHistogramBuckets - 1);  // overflow
  for (int i = 1; i < kHistogramBuckets - 1; ++i) {
    const double bound = bucket_upper_bound(i);
    EXPECT_EQ(bucket_index(bound), i) << i;
    EXPECT_EQ(bucket_index(bound * 1.0001), i + 1) << i;
    EXPECT_EQ(bucket_index(bound * 0.9999), i) << i;
  }
}

TEST(Histogram, SubMillisecondBucketsAreNarrowerThanFifteenPercent) {
  for (double us = 50; us < 1000; us *= 1.07) {
    const int i = bucket_index(us);
    EXPECT_LT(bucket_upper_bound(i) / bucket_upper_bound(i - 1), 1.15);
  }
}

TEST(Histogram, BucketizeKeepsEveryValue) {
  const std::vector<double> values = {0.5, 3, 3, 250, 251, 980, 1e9};
  const std::vector<std::int64_t> counts = bucketize(values);
  ASSERT_EQ(counts.size(), static_cast<std::size_t>(kHistogramBuckets));
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}), 7);
  EXPECT_EQ(counts[bucket_index(3)], 2);
  EXPECT_EQ(counts[0], 1);
  EXPECT_EQ(counts[kHistogramBuckets - 1], 1);
}

}  // namespace
}  // namespace matserve::client::bench
