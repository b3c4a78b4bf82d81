// Latency histogram of a run for plotting: log-spaced buckets, 20 per decade (each bound 12%
// above the last) from 1 us to 100 s plus one overflow bucket, so sub-millisecond latencies are
// resolved as finely as slow ones. Written as CSV: one row per bucket, upper bound and count.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

namespace matserve::client::bench {

struct RunReport;

inline constexpr int kBucketsPerDecade = 20;
inline constexpr int kHistogramBuckets = 8 * kBucketsPerDecade + 2;  // 1 us .. 100 s, overflow

// Upper bound in microseconds of bucket `index` (10^(index/20); infinity for the last).
double bucket_upper_bound(int index);

// The bucket of `us`: the first whose upper bound is >= us (values <= 1 us land in bucket 0).
int bucket_index(double us);

// kHistogramBuckets counts of `values_us`.
std::vector<std::int64_t> bucketize(const std::vector<double>& values_us);

// CSV `run,shape,mode,variant,precision,concurrency,le_us,count`: per run, the buckets from its
// first non-empty one to its last ("inf" for the overflow bound); counts sum to its ok requests.
void write_histogram_csv(std::ostream& out, const std::vector<RunReport>& runs);

}  // namespace matserve::client::bench
