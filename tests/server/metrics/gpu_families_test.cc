// The per-GPU families built from NVML readings given by hand (no library, no GPU): names, the
// DCGM-compatible labels, values and units, a reading NVML could not give leaving its series out,
// the clock event reasons one gauge each, and the health gauge.
#include "server/metrics/gpu_families.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace matserve::server {
namespace {

using Labels = std::map<std::string, std::string>;

const prometheus::MetricFamily* family(const std::vector<prometheus::MetricFamily>& families,
                                       const std::string& name) {
  for (const prometheus::MetricFamily& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Labels labels_of(const prometheus::ClientMetric& m) {
  Labels out;
  for (const prometheus::ClientMetric::Label& l : m.label) out[l.name] = l.value;
  return out;
}

// The value of the one sample of `name` whose labels include `want`; empty when there is none.
std::optional<double> value(const std::vector<prometheus::MetricFamily>& families,
                            const std::string& name, const Labels& want) {
  const prometheus::MetricFamily* f = family(families, name);
  if (f == nullptr) return std::nullopt;
  for (const prometheus::ClientMetric& m : f->metric) {
    const Labels have = labels_of(m);
    bool match = true;
    for (const auto& [k, v] : want) match = match && have.count(k) == 1 && have.at(k) == v;
    if (match) {
      return f->type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
    }
  }
  return std::nullopt;
}

GpuReading full_reading() {
  GpuReading g;
  g.index = 3;
  g.uuid = "GPU-12345678-9abc-def0-0123-456789abcdef";
  g.model_name = "NVIDIA H200";
  g.utilization = 0.5;
  g.power_watts = 412.5;
  g.power_limit_watts = 700;
  g.energy_joules = 9876.5;
  g.clock_event_reasons = 0x4 | 0x40;  // sw_power_cap, hw_thermal_slowdown
  g.ecc_corrected_errors = 2;
  g.ecc_uncorrected_errors = 0;
  g.xid_errors = 1;
  g.last_xid = 48;
  return g;
}

TEST(GpuFamiliesTest, EverySeriesCarriesTheDcgmJoinLabelsAndTheCudaDevice) {
  const auto families =
      gpu_families({full_reading()}, {{"GPU-12345678-9abc-def0-0123-456789abcdef", "cuda:1"}});
  ASSERT_FALSE(families.empty());
  for (const prometheus::MetricFamily& f : families) {
    for (const prometheus::ClientMetric& m : f.metric) {
      const Labels l = labels_of(m);
      EXPECT_EQ(l.at("gpu"), "3") << f.name;
      EXPECT_EQ(l.at("UUID"), "GPU-12345678-9abc-def0-0123-456789abcdef") << f.name;
      EXPECT_EQ(l.at("model_name"), "NVIDIA H200") << f.name;
      EXPECT_EQ(l.at("cuda_device"), "cuda:1") << f.name;
      EXPECT_EQ(l.count("device"), 0U) << f.name << ": DCGM's device label is nvidia<N>";
    }
  }
}

TEST(GpuFamiliesTest, ValuesInBaseUnitsWithCounterAndGaugeTypes) {
  const auto families = gpu_families({full_reading()}, {});
  const Labels gpu = {{"gpu", "3"}, {"cuda_device", "unused"}};
  EXPECT_EQ(value(families, "matserve_gpu_power_watts", gpu), 412.5);
  EXPECT_EQ(value(families, "matserve_gpu_power_limit_watts", gpu), 700);
  EXPECT_EQ(value(families, "matserve_gpu_energy_joules_total", gpu), 9876.5);
  EXPECT_EQ(value(families, "matserve_gpu_ecc_corrected_errors_total", gpu), 2);
  EXPECT_EQ(value(families, "matserve_gpu_ecc_uncorrected_errors_total", gpu), 0);
  EXPECT_EQ(value(families, "matserve_gpu_xid_errors_total", gpu), 1);
  EXPECT_EQ(value(families, "matserve_gpu_last_xid", gpu), 48);
  EXPECT_EQ(value(families, "matserve_gpu_healthy", gpu), 0);  // an Xid and a thermal slowdown
  for (const char* counter :
       {"matserve_gpu_energy_joules_total", "matserve_gpu_ecc_corrected_errors_total",
        "matserve_gpu_ecc_uncorrected_errors_total", "matserve_gpu_xid_errors_total"}) {
    ASSERT_NE(family(families, counter), nullptr) << counter;
    EXPECT_EQ(family(families, counter)->type, prometheus::MetricType::Counter) << counter;
  }
  EXPECT_EQ(family(families, "matserve_gpu_power_limit_watts")->type,
            prometheus::MetricType::Gauge);
}

TEST(GpuFamiliesTest, OneGaugePerNamedClockEventReason) {
  const auto families = gpu_families({full_reading()}, {});
  const prometheus::MetricFamily* f = family(families, "matserve_gpu_clock_event_reason_active");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->metric.size(), std::size(kClockEventReasons));
  for (const ClockEventReason& r : kClockEventReasons) {
    const bool active = r.bit == 0x4 || r.bit == 0x40;
    EXPECT_EQ(value(families, f->name, {{"reason", r.name}}), active ? 1 : 0) << r.name;
  }
}

TEST(GpuFamiliesTest, AReadingNvmlCouldNotGiveLeavesItsSeriesOut) {
  GpuReading bare;  // what a driver without the optional functions gives: utilization only
  bare.index = 0;
  bare.uuid = "GPU-00000000-0000-0000-0000-000000000000";
  bare.utilization = 0.25;
  const auto families = gpu_families({bare, full_reading()}, {});
  const Labels gpu0 = {{"gpu", "0"}};
  EXPECT_EQ(value(families, "matserve_gpu_utilization_ratio", gpu0), 0.25);
  for (const char* absent :
       {"matserve_gpu_power_watts", "matserve_gpu_power_limit_watts",
        "matserve_gpu_energy_joules_total", "matserve_gpu_clock_event_reason_active",
        "matserve_gpu_ecc_corrected_errors_total", "matserve_gpu_ecc_uncorrected_errors_total",
        "matserve_gpu_xid_errors_total", "matserve_gpu_last_xid"}) {
    EXPECT_EQ(value(families, absent, gpu0), std::nullopt) << absent;
    EXPECT_NE(value(families, absent, {{"gpu", "3"}}), std::nullopt) << absent;
  }
  // Health is always there: what NVML cannot read counts as no trouble.
  EXPECT_EQ(value(families, "matserve_gpu_healthy", gpu0), 1);
  // A family no GPU has a reading for is left out entirely (no empty HELP/TYPE block).
  EXPECT_EQ(family(gpu_families({bare}, {}), "matserve_gpu_power_watts"), nullptr);
}

TEST(GpuFamiliesTest, NoReadingsNoFamilies) {
  EXPECT_TRUE(gpu_families({}, {}).empty());
}

}  // namespace
}  // namespace matserve::server
