// Host CPU and memory limits from the affinity mask, /proc and the cgroup files: see host_limits.h.
#include "server/runtime/host_limits.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace matserve::server {
namespace {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string join(const std::string& root, const std::string& path) {
  std::string r = root;
  while (!r.empty() && r.back() == '/') r.pop_back();
  return r + (path.empty() || path[0] != '/' ? "/" : "") + path;
}

// The process's cgroup path for a v1 controller ("cpu", "memory") or for v2 (controller "").
std::optional<std::string> cgroup_path(const std::string& root, const std::string& controller) {
  const std::optional<std::string> text = read_file(join(root, "/proc/self/cgroup"));
  if (!text) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (controller.empty() ? (f[0] == "0" && f[1].empty())
                           : absl::c_linear_search(absl::StrSplit(f[1], ','), controller)) {
      return std::string(f[2]);
    }
  }
  return std::nullopt;
}

// The directories to look in for a controller's files, innermost first: the process's cgroup and
// its ancestors up to the mount point (a limit set on a parent applies as well). Inside a
// container's cgroup namespace the path is "/" and only the mount point itself is read.
std::vector<std::string> cgroup_dirs(const std::string& mount, const std::string& path) {
  std::vector<std::string> dirs;
  std::string p = path;
  while (true) {
    dirs.push_back(join(mount, p));
    if (p.empty() || p == "/") break;
    const std::size_t slash = p.rfind('/');
    p = slash == 0 || slash == std::string::npos ? "/" : p.substr(0, slash);
  }
  return dirs;
}

std::optional<double> cgroup_cpu_quota(const std::string& root) {
  std::optional<double> best;
  auto keep = [&best](std::optional<double> q) {
    if (q && (!best || *q < *best)) best = q;
  };
  if (const std::optional<std::string> v2 = cgroup_path(root, "")) {
    for (const std::string& dir : cgroup_dirs(join(root, "/sys/fs/cgroup"), *v2)) {
      if (std::optional<std::string> t = read_file(dir + "/cpu.max")) keep(parse_cpu_max(*t));
    }
  }
  if (const std::optional<std::string> v1 = cgroup_path(root, "cpu")) {
    for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
      for (const std::string& dir : cgroup_dirs(join(root, mount), *v1)) {
        std::optional<std::string> quota = read_file(dir + "/cpu.cfs_quota_us");
        std::optional<std::string> period = read_file(dir + "/cpu.cfs_period_us");
        if (quota && period) keep(parse_cfs_quota(*quota, *period));
      }
    }
  }
  return best;
}

std::optional<std::int64_t> cgroup_memory_limit(const std::string& root) {
  std::optional<std::int64_t> best;
  auto keep = [&best](std::optional<std::int64_t> m) {
    if (m && (!best || *m < *best)) best = m;
  };
  if (const std::optional<std::string> v2 = cgroup_path(root, "")) {
    for (const std::string& dir : cgroup_dirs(join(root, "/sys/fs/cgroup"), *v2)) {
      if (std::optional<std::string> t = read_file(dir + "/memory.max")) {
        keep(parse_memory_limit(*t));
      }
    }
  }
  if (const std::optional<std::string> v1 = cgroup_path(root, "memory")) {
    for (const std::string& dir : cgroup_dirs(join(root, "/sys/fs/cgroup/memory"), *v1)) {
      if (std::optional<std::string> t = read_file(dir + "/memory.limit_in_bytes")) {
        keep(parse_memory_limit(*t));
      }
    }
  }
  return best;
}

}  // namespace

std::optional<double> parse_cpu_max(const std::string& text) {
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  double quota = 0, period = 0;
  if (f.size() != 2 || f[0] == "max" || !absl::SimpleAtod(f[0], &quota) ||
      !absl::SimpleAtod(f[1], &period) || quota <= 0 || period <= 0) {
    return std::nullopt;
  }
  return quota / period;
}

std::optional<double> parse_cfs_quota(const std::string& quota, const std::string& period) {
  double q = 0, p = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(quota), &q) ||
      !absl::SimpleAtod(absl::StripAsciiWhitespace(period), &p) || q <= 0 || p <= 0) {
    return std::nullopt;  // -1: no quota
  }
  return q / p;
}

std::optional<std::int64_t> parse_memory_limit(const std::string& text) {
  std::int64_t bytes = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &bytes) || bytes <= 0) {
    return std::nullopt;  // "max"
  }
  // cgroup v1 reports "no limit" as the largest page-aligned int64 (about 8 EiB).
  if (bytes >= (std::int64_t{1} << 60)) return std::nullopt;
  return bytes;
}

HostLimits read_host_limits(const std::string& root) {
  HostLimits h;
  cpu_set_t set;
  CPU_ZERO(&set);
  const int affinity = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  h.cpus = std::max(1, affinity);
  h.cpu_quota = cgroup_cpu_quota(root);
  if (h.cpu_quota) {
    h.cpus = std::clamp(static_cast<int>(std::ceil(*h.cpu_quota - 1e-9)), 1, h.cpus);
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  h.memory_bytes =
      pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : std::int64_t{16} << 30;
  if (const std::optional<std::int64_t> limit = cgroup_memory_limit(root);
      limit && *limit < h.memory_bytes) {
    h.memory_bytes = *limit;
    h.memory_limited_by_cgroup = true;
  }
  return h;
}

MemoryBudget choose_memory_budget(std::int64_t requested, std::int64_t capacity,
                                  double default_share, double max_share) {
  const auto share = [capacity](double s) {
    return static_cast<std::int64_t>(static_cast<double>(capacity) * s);
  };
  if (requested <= 0) return {share(default_share), false};
  if (requested > share(max_share)) return {share(max_share), true};
  return {requested, false};
}

}  // namespace matserve::server
