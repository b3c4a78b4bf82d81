// Building prometheus::MetricFamily values by hand, for the families a scrape computes from a
// snapshot (runtime state, NVML readings) rather than keeps in the registry.
#pragma once

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "prometheus/metric_family.h"

namespace matserve::server {

using MetricLabels = std::vector<prometheus::ClientMetric::Label>;

// Collects families in order (a deque: references stay valid), dropping the empty ones.
class FamilyBuilder {
 public:
  prometheus::MetricFamily& add(std::string name, std::string help, prometheus::MetricType type) {
    families_.push_back(prometheus::MetricFamily{std::move(name), std::move(help), type, {}});
    return families_.back();
  }
  std::vector<prometheus::MetricFamily> take() && {
    std::vector<prometheus::MetricFamily> out;
    for (prometheus::MetricFamily& f : families_) {
      if (!f.metric.empty()) out.push_back(std::move(f));
    }
    return out;
  }

 private:
  std::deque<prometheus::MetricFamily> families_;
};

// Appends one sample (a counter's or a gauge's value, by the family's type).
inline void add_sample(prometheus::MetricFamily& f, MetricLabels labels, double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (f.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

}  // namespace matserve::server
