// Dynamic batching: see dynamic_batcher.h. The request at the front of a group's queue gathers
// the batch: it launches at once when fewer than kMaxInFlight launches of the group are running
// (nothing to wait behind), else when the batch is full, a running launch ends, or its delay is
// up. Requests arriving meanwhile queue behind it; the next front request gathers the next batch.
#include "server/runtime/dynamic_batcher.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/registry.h"
#include "server/runtime/resident_store.h"

namespace matserve::server {
namespace {

// Two launches of a kind may run at once: one batch's host work (staging, replies) overlaps the
// other's kernel; a third request waits to join the next batch.
constexpr int kMaxInFlight = 2;

void add_operand(std::string& key, const Operand& o) {
  absl::StrAppend(&key, o.rows, "x", o.cols, ":", static_cast<int>(o.dtype), ":",
                  static_cast<int>(o.layout), ":");
  if (o.is_resident()) {
    absl::StrAppend(&key, "r", o.resident->device, "|");  // resident, on this device
  } else {
    key += "i|";  // inline
  }
}

std::uint64_t bits(double v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Everything but the operands' bytes and the result's destination, for one product of a batch.
GemmShape product_shape(const GemmJob& j) {
  GemmOptions o;
  o.transpose_a = j.transpose_a;
  o.transpose_b = j.transpose_b;
  o.alpha = j.alpha;
  o.beta = j.beta;
  o.precision = j.precision;
  o.out_dtype = j.out_dtype;
  o.out_layout = j.out_layout;
  o.keep_result = j.keep_result;
  o.owner = j.owner;
  return gemm_shape(std::move(o), j.a, j.b, j.c.has_value());
}

}  // namespace

DynamicBatcher::DynamicBatcher(BatchingOptions options, RunBatch run_batch, RunOne run_one)
    : options_(options), run_batch_(std::move(run_batch)), run_one_(std::move(run_one)) {}

std::optional<std::string> DynamicBatcher::key(const GemmJob& job, std::string_view variant) const {
  if (!enabled() || job.device_out != nullptr || in_host_memory(job.a) || in_host_memory(job.b) ||
      (job.c && in_host_memory(*job.c))) {
    return std::nullopt;
  }
  if (!variant.empty() && variant != "auto") {
    const kernels::GemmVariant* v = kernels::find_gemm_variant(variant);
    if (v == nullptr || !v->batched) return std::nullopt;
  }
  // The caller too: a merged launch's results are created under one owner (and resident
  // handles are per owner).
  std::string key = absl::StrCat(job.owner.size(), ":", job.owner, "|");
  add_operand(key, job.a);
  add_operand(key, job.b);
  if (job.c.has_value()) add_operand(key, *job.c);
  absl::StrAppend(&key, job.transpose_a ? "T" : "N", job.transpose_b ? "T" : "N", ":",
                  bits(job.alpha), ":", bits(job.beta), ":", static_cast<int>(job.precision), ":",
                  static_cast<int>(job.out_dtype), ":", static_cast<int>(job.out_layout), ":",
                  job.keep_result ? "keep" : "reply", ":",
                  variant.empty() ? std::string("auto") : std::string(variant));
  return key;
}

absl::Status DynamicBatcher::run(const std::string& key, const GemmJob& job,
                                 std::string_view variant, std::span<std::byte> out,
                                 const Waiter& waiter, Outcome& outcome) {
  Pending me{&job, variant, out, &waiter, &outcome, absl::Now()};
  absl::MutexLock lock(&mu_);
  // Looked up each time: the map's nodes move when it rehashes.
  const auto group = [this, &key]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Group& { return groups_[key]; };
  group().open.push_back(&me);
  while (!me.done) {
    Group& now = group();
    if (!now.collecting && now.open.front() == &me) {
      now.collecting = true;
      const auto max = static_cast<std::size_t>(options_.max_batch_size);
      const auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        const Group& x = group();
        return x.open.size() >= max || x.in_flight < kMaxInFlight;
      };
      mu_.AwaitWithDeadline(absl::Condition(&ready), me.arrived + options_.max_delay);
      Group& ready_group = group();
      const std::size_t n = std::min(max, ready_group.open.size());
      std::vector<Pending*> batch(ready_group.open.begin(), ready_group.open.begin() + n);
      ready_group.open.erase(ready_group.open.begin(), ready_group.open.begin() + n);
      ready_group.collecting = false;
      ++ready_group.in_flight;
      mu_.Unlock();
      execute(batch);
      mu_.Lock();
      Group& after = group();
      --after.in_flight;
      for (Pending* p : batch) p->done = true;
      continue;
    }
    const auto my_turn = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      const Group& x = group();
      return me.done || (!x.collecting && x.open.front() == &me);
    };
    mu_.Await(absl::Condition(&my_turn));
  }
  if (Group& last = group(); last.open.empty() && last.in_flight == 0 && !last.collecting) {
    groups_.erase(key);  // nobody waits on it: shapes seen once do not accumulate
  }
  return me.status;
}

void DynamicBatcher::execute(std::span<Pending* const> batch) {
  const absl::Time launched = absl::Now();
  const auto finish = [&](Pending& p, int merged) {
    p.outcome->merged_requests = merged;
    p.outcome->times.batch_wait_us = absl::ToDoubleMicroseconds(launched - p.arrived);
    p.outcome->times.queue_us += p.outcome->times.batch_wait_us;
  };
  if (batch.size() == 1) {
    Pending& p = *batch[0];
    p.status = run_one_(*p.job, p.variant, p.out, *p.waiter, *p.outcome);
    finish(p, 1);
    return;
  }
  GemmBatchJob merged;
  merged.shape = product_shape(*batch[0]->job);
  merged.count = static_cast<std::int64_t>(batch.size());
  for (Pending* p : batch) {
    merged.a.push_back(p->job->a);
    merged.b.push_back(p->job->b);
    if (p->job->c.has_value()) merged.c.push_back(*p->job->c);
    if (!merged.shape.keep_result) merged.outs.push_back(p->out);
  }
  Outcome together;
  const absl::Status status = run_batch_(merged, batch[0]->variant, *batch[0]->waiter, together);
  if (!status.ok()) {
    // Whatever failed the launch (one request's memory, a deadline) is found again, alone.
    for (Pending* p : batch) {
      p->status = run_one_(*p->job, p->variant, p->out, *p->waiter, *p->outcome);
      finish(*p, 1);
    }
    return;
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    Pending& p = *batch[i];
    Outcome& o = *p.outcome;
    o.variant = together.variant;
    o.device = together.device;
    o.times = together.times;
    o.work = together.work;
    o.launch_path = together.launch_path;
    if (i < together.results.size()) o.result = together.results[i];
    if (2 * i + 1 < together.fp8_scales.size()) {
      o.fp8_scales.assign(together.fp8_scales.begin() + static_cast<std::ptrdiff_t>(2 * i),
                          together.fp8_scales.begin() + static_cast<std::ptrdiff_t>(2 * i + 2));
    }
    p.status = absl::OkStatus();
    finish(p, static_cast<int>(batch.size()));
  }
}

}  // namespace matserve::server
