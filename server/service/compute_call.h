// The lifecycle of a compute RPC (Multiply, MultiplyBatched, Transpose), written once: the
// in-flight count, authorization, validation into a job, the quota, the reply's header, the runtime
// call, kept results, the metrics record and the stage trace. Each RPC gives only its own steps
// (ComputeSteps); what the lifecycle reads of a job is in ComputeJobFacts. Included by
// matrix_service.cc only: it defines MatrixServiceImpl::compute_call.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/types.h"
#include "server/service/matrix_service.h"
#include "server/service/proto_convert.h"
#include "server/service/service_context.h"
#include "server/service/status_mapping.h"

namespace matserve::server {

// One compute RPC, named once.
struct ComputeRpc {
  const char* name;  // the metrics' rpc label and the name the permission check reports
  const char* op;    // the metrics' op label: "gemm" or "transpose"
  const char* kind;  // the trace label's stem ("gemm batched"); " resident"/" inline" follows
  bool resident;     // uses or keeps resident matrices (the resident permission too)
};

// The steps only an RPC knows, in the order the lifecycle calls them:
//   validate(const HandleResolver&, const RegionResolver*) -> absl::StatusOr<Job>
//   size_reply(Job&) -> std::span<std::byte>: writes the reply's result header and sizes its data;
//       returns where the runtime writes the result (empty when the job itself says where)
//   run(Job&, std::span<std::byte> out, Outcome&) -> absl::Status: the runtime call
//   keep(Job&, Outcome&, absl::Time received) -> absl::Status: publishes kept results into the
//       reply (unless the call was abandoned meanwhile: service_context.h's abandoned())
//   fill(const Job&, const Outcome&, RequestRecord&): the reply's rate and the RPC's own fields
template <typename Validate, typename SizeReply, typename Run, typename Keep, typename Fill>
struct ComputeSteps {
  Validate validate;
  SizeReply size_reply;
  Run run;
  Keep keep;
  Fill fill;
};
// Written positionally (with each step's name in a comment): clang before 17 deduces no aggregate
// from designated initializers.
template <typename Validate, typename SizeReply, typename Run, typename Keep, typename Fill>
ComputeSteps(Validate, SizeReply, Run, Keep, Fill)
    -> ComputeSteps<Validate, SizeReply, Run, Keep, Fill>;

// What the lifecycle reads of each kind of job: its owner and shared-memory regions, its shape
// for the trace label, the bytes a kept result holds against the quota, its precision and
// problem size for the metrics, and the resident matrix it keeps its result in when that is an
// operand's (an in-place transpose), which release_handles may not name.
template <typename Job>
struct ComputeJobFacts;

// A GEMM's facts from its options and its shape (m, n, k): a single GEMM's or a batch's.
template <typename Gemm>
struct GemmFacts {
  static std::string shape(const Gemm& j) { return absl::StrCat(j.m(), "x", j.n(), "x", j.k()); }
  static std::size_t kept_bytes(const Gemm& j) { return j.keep_result ? j.out_bytes() : 0; }
  static std::string precision(const Gemm& j) {
    return std::string(kernels::precision_name(j.precision));
  }
  static double problem_size(const Gemm& j) {
    return static_cast<double>(j.m()) * static_cast<double>(j.n()) * static_cast<double>(j.k());
  }
  static std::string_view kept_in_place(const Gemm& /*j*/) { return {}; }
};

template <>
struct ComputeJobFacts<GemmJob> : GemmFacts<GemmJob> {
  static std::string& owner(GemmJob& j) { return j.owner; }
  static const auto& regions(const GemmJob& j) { return j.regions; }
};

template <>
struct ComputeJobFacts<GemmBatchJob> {
  using One = GemmFacts<GemmShape>;
  static std::string& owner(GemmBatchJob& b) { return b.shape.owner; }
  static const auto& regions(const GemmBatchJob& b) { return b.shape.regions; }
  static std::string shape(const GemmBatchJob& b) {
    return absl::StrCat(One::shape(b.shape), " x", b.count);
  }
  static std::size_t kept_bytes(const GemmBatchJob& b) {
    return One::kept_bytes(b.shape) * static_cast<std::size_t>(b.count);
  }
  static std::string precision(const GemmBatchJob& b) { return One::precision(b.shape); }
  static double problem_size(const GemmBatchJob& b) {
    return One::problem_size(b.shape) * static_cast<double>(b.count);
  }
  static std::string_view kept_in_place(const GemmBatchJob& /*b*/) { return {}; }
};

template <>
struct ComputeJobFacts<TransposeJob> {
  static std::string& owner(TransposeJob& j) { return j.owner; }
  static const auto& regions(const TransposeJob& j) { return j.regions; }
  static std::string shape(const TransposeJob& j) { return absl::StrCat(j.a.rows, "x", j.a.cols); }
  static std::size_t kept_bytes(const TransposeJob& j) { return j.keep_result ? j.out_bytes() : 0; }
  static std::string precision(const TransposeJob& j) {
    return std::string(kernels::dtype_name(j.a.dtype));
  }
  static double problem_size(const TransposeJob& j) {
    return static_cast<double>(j.a.rows) * static_cast<double>(j.a.cols);
  }
  static std::string_view kept_in_place(const TransposeJob& j) {
    return j.in_place && j.a.is_resident() ? std::string_view(j.a.resident->handle)
                                           : std::string_view();
  }
};

// A string's bytes as the span the runtime writes a result into.
inline std::span<std::byte> as_span(std::string& s) {
  return {reinterpret_cast<std::byte*>(s.data()), s.size()};
}

// "cuda:0 NVIDIA H100 80GB HBM3" -> "cuda:0" for metric labels.
inline std::string device_label(const std::string& device) {
  const auto space = device.find(' ');
  return space == std::string::npos ? device : device.substr(0, space);
}

// release_handles checked before the call runs, so that a call that succeeds can release them
// all: each names a matrix of `owner` (being filled or complete), once, and not `kept_in_place`
// (the matrix the call keeps its result in, if an operand's).
template <typename Request>
absl::Status check_release_handles(const Request& request, std::string_view kept_in_place,
                                   ResidentStore& residents, const std::string& owner) {
  const auto& handles = request.release_handles();
  absl::flat_hash_map<std::string_view, int> seen;  // handle -> its first index
  for (int i = 0; i < handles.size(); ++i) {
    const std::string field = absl::StrCat("release_handles[", i, "]");
    const std::string& handle = handles[i];
    if (handle.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": empty handle"));
    if (const auto [at, added] = seen.emplace(handle, i); !added) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": '", handle, "' is named twice (also release_handles[", at->second, "])"));
    }
    if (!kept_in_place.empty() && handle == kept_in_place) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": '", handle, "' is the matrix this in-place call keeps its result in"));
    }
    if (absl::StatusOr<std::shared_ptr<ResidentMatrix>> m = residents.find(field, handle, owner);
        !m.ok()) {
      return m.status();
    }
  }
  return absl::OkStatus();
}

// What every compute reply shares: the variant and device that ran, the timing, the
// verification; and the same facts for the request's metrics record.
template <typename Reply>
void report_outcome(const Outcome& outcome, Reply& reply, RequestRecord& rec) {
  reply.set_variant(outcome.variant);
  reply.set_device(outcome.device);
  fill_timing(outcome.times, reply.mutable_timing());
  reply.mutable_timing()->set_merged_requests(outcome.merged_requests);
  if (outcome.verification.has_value()) {
    fill_verification(*outcome.verification, reply.mutable_verification());
  }
  rec.variant = outcome.variant;
  rec.device = device_label(outcome.device);
  rec.times = outcome.times;
  rec.work = outcome.work;
  rec.launch_path = outcome.launch_path;
}

template <typename Job, typename Request, typename Reply, typename Steps>
grpc::Status MatrixServiceImpl::compute_call(const ComputeRpc& rpc, grpc::ServerContext& context,
                                             const Request& request, Reply& reply, Steps steps) {
  using Facts = ComputeJobFacts<Job>;
  const absl::Time received = absl::Now();
  const std::size_t request_bytes = request.ByteSizeLong();
  const CallScope call = begin_call(request_bytes >= CpuKeepAwake::kHeavyCallBytes);
  RequestRecord rec{
      .rpc = rpc.name, .op = rpc.op, .variant = "none", .precision = "none", .device = "none"};
  rec.bytes_received = static_cast<std::int64_t>(request_bytes);
  Outcome outcome;
  StageMarks& marks = outcome.marks;
  if (runtime_.trace().enabled()) {
    marks.start(absl::StrCat(rpc.kind, rpc.resident ? " resident" : " inline"));
  }
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner = gate_.authorize_compute(context, rpc.resident, rpc.name);
    if (!owner.ok()) return owner.status();
    marks.mark("authorize");
    const RegionResolver regions = gate_.regions(*owner);
    absl::StatusOr<Job> job = steps.validate(gate_.handles(*owner), &regions);
    if (!job.ok()) return job.status();
    Facts::owner(*job) = *owner;
    if (absl::Status s = check_release_handles(request, Facts::kept_in_place(*job),
                                               runtime_.residents(), *owner);
        !s.ok()) {
      return s;
    }
    marks.mark("validate");
    if (marks.enabled()) marks.relabel(absl::StrCat(marks.label(), " ", Facts::shape(*job)));
    absl::StatusOr<QuotaReservation> quota = gate_.reserve_quota(*owner, Facts::kept_bytes(*job));
    if (!quota.ok()) return quota.status();
    rec.precision = Facts::precision(*job);
    rec.problem_size = Facts::problem_size(*job);
    if (absl::Status s = cancelled_or_expired(context); !s.ok()) return s;
    const std::span<std::byte> out = steps.size_reply(*job);
    marks.mark("quota+reply_alloc");
    if (absl::Status s = steps.run(*job, out, outcome); !s.ok()) return s;
    if (absl::Status s = regions_intact(Facts::regions(*job)); !s.ok()) return s;
    // A call its client gave up on fails, so it releases nothing (its kept result is dropped in
    // keep, as always).
    if (!request.release_handles().empty()) {
      if (absl::Status s = given_up(context, received, "nothing in release_handles was released");
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = steps.keep(*job, outcome, received); !s.ok()) return s;
    marks.mark("publish");
    // As a Release call would; one released meanwhile by another call is gone either way.
    for (const std::string& handle : request.release_handles()) {
      (void)runtime_.residents().release(handle, *owner);
    }
    outcome.times.total_us = micros_since(received);
    report_outcome(outcome, reply, rec);
    steps.fill(*job, outcome, rec);
    return absl::OkStatus();
  }();
  if (!status.ok()) reply.Clear();  // a failed call carries no partial result
  rec.code = absl::StatusCodeToString(status.code());
  rec.times.total_us = micros_since(received);
  rec.bytes_sent = static_cast<std::int64_t>(reply.ByteSizeLong());
  metrics_.record(std::move(rec));
  grpc::Status done = to_grpc(status);
  marks.mark("metrics");
  runtime_.trace().record(marks);
  return done;
}

}  // namespace matserve::server
