// Nearest-rank percentiles and the per-worker recorder's bookkeeping (see stats.h).
#include "client/bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace matserve::client::bench {

double nearest_rank(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto n = static_cast<double>(sorted.size());
  auto rank = static_cast<std::int64_t>(std::ceil(p / 100.0 * n));
  rank = std::clamp<std::int64_t>(rank, 1, static_cast<std::int64_t>(sorted.size()));
  return sorted[static_cast<std::size_t>(rank - 1)];
}

Summary summarize(std::vector<double>& values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<std::int64_t>(values.size());
  s.min = values.front();
  s.max = values.back();
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(s.count);
  s.p50 = nearest_rank(values, 50);
  s.p90 = nearest_rank(values, 90);
  s.p95 = nearest_rank(values, 95);
  s.p99 = nearest_rank(values, 99);
  return s;
}

std::int64_t Recorder::errors() const {
  std::int64_t n = 0;
  for (const auto& [code, count] : errors_by_code) n += count;
  return n;
}

void Recorder::record_ok(double client, double total, double kernel, double queue, double h2d,
                         double d2h, int merged, double batch_wait) {
  client_us.push_back(client);
  server_total_us.push_back(total);
  kernel_us.push_back(kernel);
  overhead_us.push_back(total - kernel);
  queue_us.push_back(queue);
  host_to_device_us.push_back(h2d);
  device_to_host_us.push_back(d2h);
  if (merged > 0) {
    merged_requests.push_back(merged);
    batch_wait_us.push_back(batch_wait);
  }
  kernel_us_sum += kernel / std::max(merged, 1);
}

void Recorder::record_error(const std::string& code, const std::string& message) {
  ++errors_by_code[code];
  if (first_error.empty()) first_error = code + ": " + message;
}

namespace {
void append(std::vector<double>& to, const std::vector<double>& from) {
  to.insert(to.end(), from.begin(), from.end());
}
void add_counts(std::map<std::string, std::int64_t>& to,
                const std::map<std::string, std::int64_t>& from) {
  for (const auto& [key, count] : from) to[key] += count;
}
}  // namespace

void Recorder::merge(const Recorder& other) {
  append(client_us, other.client_us);
  append(server_total_us, other.server_total_us);
  append(kernel_us, other.kernel_us);
  append(overhead_us, other.overhead_us);
  append(queue_us, other.queue_us);
  append(host_to_device_us, other.host_to_device_us);
  append(device_to_host_us, other.device_to_host_us);
  append(release_us, other.release_us);
  append(merged_requests, other.merged_requests);
  append(batch_wait_us, other.batch_wait_us);
  add_counts(errors_by_code, other.errors_by_code);
  add_counts(variants, other.variants);
  add_counts(devices, other.devices);
  add_counts(precisions, other.precisions);
  if (first_error.empty()) first_error = other.first_error;
  kernel_us_sum += other.kernel_us_sum;
  release_errors += other.release_errors;
  for (const auto& [name, op] : other.ops) {
    append(ops[name].client_us, op.client_us);
    ops[name].errors += op.errors;
  }
  completions.insert(completions.end(), other.completions.begin(), other.completions.end());
}

}  // namespace matserve::client::bench
