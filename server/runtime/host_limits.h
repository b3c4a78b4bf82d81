// What this process may use of its host: CPUs (the affinity mask, and the CPU quota of its cgroup,
// v1 or v2, as a container's CPU limit sets it) and memory (physical memory, and the cgroup's
// memory limit). Thread pools and the CPU backend's memory budget are sized from these, so that a
// server in a container limited to 8 CPUs of a 128-core host starts 8-sized pools, not 128.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace matserve::server {

struct HostLimits {
  int cpus = 1;                     // >= 1
  std::optional<double> cpu_quota;  // the cgroup's quota in CPUs (2.5 = 250 ms per 100 ms)
  std::int64_t memory_bytes = 0;    // physical memory, or the cgroup's limit when lower
  bool memory_limited_by_cgroup = false;
};

// Reads the limits of this process. `root` prefixes every path read ("/" on a real system; tests
// pass a directory laid out like /proc and /sys/fs/cgroup).
HostLimits read_host_limits(const std::string& root = "/");

// Parsers, exposed for tests. Each returns nullopt for "no limit" or text it does not understand.
// cgroup v2 cpu.max: "max 100000" or "<quota> <period>".
std::optional<double> parse_cpu_max(const std::string& text);
// cgroup v1: cpu.cfs_quota_us ("-1" for none) and cpu.cfs_period_us.
std::optional<double> parse_cfs_quota(const std::string& quota, const std::string& period);
// cgroup v2 memory.max ("max" or bytes) or v1 memory.limit_in_bytes (a huge value for none).
std::optional<std::int64_t> parse_memory_limit(const std::string& text);

// A memory budget for a device of `capacity` bytes: `requested` when it is positive and at most
// `max_share` of the capacity, `default_share` of it when `requested` is 0; a larger request is
// clamped to `max_share` of the capacity and `clamped` says so (the caller logs it).
struct MemoryBudget {
  std::int64_t bytes = 0;
  bool clamped = false;
};
MemoryBudget choose_memory_budget(std::int64_t requested, std::int64_t capacity,
                                  double default_share, double max_share);

}  // namespace matserve::server
