// Log-spaced latency buckets and their CSV (see histogram.h).
#include "client/bench/histogram.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"
#include "client/bench/report.h"

namespace matserve::client::bench {

double bucket_upper_bound(int index) {
  if (index >= kHistogramBuckets - 1) return std::numeric_limits<double>::infinity();
  return std::pow(10.0, static_cast<double>(index) / kBucketsPerDecade);
}

int bucket_index(double us) {
  if (!(us > 1)) return 0;
  int i = static_cast<int>(std::ceil(std::log10(us) * kBucketsPerDecade));
  if (i >= kHistogramBuckets - 1) return kHistogramBuckets - 1;
  // log10 rounding can put a value one bucket off near a bound: settle it against the bounds.
  if (us > bucket_upper_bound(i)) ++i;
  if (i > 0 && us <= bucket_upper_bound(i - 1)) --i;
  return i;
}

std::vector<std::int64_t> bucketize(const std::vector<double>& values_us) {
  std::vector<std::int64_t> counts(kHistogramBuckets, 0);
  for (const double v : values_us) ++counts[bucket_index(v)];
  return counts;
}

void write_histogram_csv(std::ostream& out, const std::vector<RunReport>& runs) {
  out << "run,shape,mode,variant,precision,concurrency,le_us,count\n";
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const RunReport& run = runs[r];
    int first = 0, last = static_cast<int>(run.histogram.size()) - 1;
    while (first <= last && run.histogram[first] == 0) ++first;
    while (last >= first && run.histogram[last] == 0) --last;
    for (int i = first; i <= last; ++i) {
      const double bound = bucket_upper_bound(i);
      out << absl::StrFormat(
          "%d,%s,%s,%s,%s,%d,%s,%d\n", r + 1, run.spec.shape.name(), ModeName(run.spec.mode),
          run.spec.variant, run.spec.precision, run.spec.concurrency,
          std::isinf(bound) ? "inf" : absl::StrFormat("%.10g", bound), run.histogram[i]);
    }
  }
}

}  // namespace matserve::client::bench
