// MatrixService handlers: see matrix_service.h.
#include "server/service/matrix_service.h"

#include <chrono>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/registry.h"
#include "matserve/version.h"
#include "server/service/proto_convert.h"
#include "server/service/service_context.h"
#include "server/service/status_mapping.h"
#include "server/service/validation.h"

namespace matserve::server {
namespace {

std::span<std::byte> as_span(std::string& s) {
  return {reinterpret_cast<std::byte*>(s.data()), s.size()};
}

// "cuda:0 NVIDIA H100 80GB HBM3" -> "cuda:0" for metric labels.
std::string device_label(const std::string& device) {
  const auto space = device.find(' ');
  return space == std::string::npos ? device : device.substr(0, space);
}

// What Multiply and Transpose replies share: the variant and device that ran, the timing, the
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

}  // namespace

template <typename Reply>
grpc::Status MatrixServiceImpl::finish_rpc(const absl::Status& status, Reply& reply,
                                           RequestRecord& rec, absl::Time received) {
  if (!status.ok()) reply.Clear();  // a failed call carries no partial result
  rec.code = absl::StatusCodeToString(status.code());
  rec.times.total_us = micros_since(received);
  rec.bytes_sent = static_cast<std::int64_t>(reply.ByteSizeLong());
  metrics_.record(rec);
  return to_grpc(status);
}

MatrixServiceImpl::MatrixServiceImpl(Runtime& runtime, Metrics& metrics,
                                     const ServiceLimits& limits, const Authenticator& auth,
                                     CpuKeepAwake* keep_awake)
    : runtime_(runtime),
      metrics_(metrics),
      limits_(limits),
      keep_awake_(keep_awake),
      gate_(runtime_, limits_, auth) {}

grpc::Status MatrixServiceImpl::Multiply(grpc::ServerContext* context,
                                         const v1::MultiplyRequest* request,
                                         v1::MultiplyReply* reply) {
  const absl::Time received = absl::Now();
  const std::size_t request_bytes = request->ByteSizeLong();
  const CallScope call = begin_call(request_bytes >= CpuKeepAwake::kHeavyCallBytes);
  RequestRecord rec{
      .rpc = "Multiply", .op = "gemm", .variant = "none", .precision = "none", .device = "none"};
  rec.bytes_received = static_cast<std::int64_t>(request_bytes);
  Outcome outcome;
  StageMarks& marks = outcome.marks;
  const bool resident = request->keep_result() || !request->a_handle().empty() ||
                        !request->b_handle().empty() || !request->c_handle().empty();
  if (runtime_.trace().enabled()) marks.start(resident ? "gemm resident" : "gemm inline");
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner = gate_.authorize_compute(*context, resident, "Multiply");
    if (!owner.ok()) return owner.status();
    marks.mark("authorize");
    const RegionResolver regions = gate_.regions(*owner);
    absl::StatusOr<GemmJob> job =
        validate_multiply(*request, limits_, gate_.handles(*owner), &regions);
    if (!job.ok()) return job.status();
    job->owner = *owner;
    marks.mark("validate");
    if (marks.enabled()) {
      marks.relabel(absl::StrCat(marks.label(), " ", job->m(), "x", job->n(), "x", job->k()));
    }
    absl::StatusOr<QuotaReservation> quota =
        gate_.reserve_quota(*owner, job->keep_result ? job->out_bytes() : 0);
    if (!quota.ok()) return quota.status();
    rec.precision = std::string(kernels::precision_name(job->precision));
    rec.problem_size = static_cast<double>(job->m()) * static_cast<double>(job->n()) *
                       static_cast<double>(job->k());
    if (absl::Status s = cancelled_or_expired(*context); !s.ok()) return s;
    v1::Matrix* c = reply->mutable_c();
    c->set_rows(job->m());
    c->set_cols(job->n());
    c->set_dtype(to_proto(job->out_dtype));
    c->set_layout(request->output_layout());
    std::string* data = c->mutable_data();
    // The result in the reply only when it goes nowhere else (kept, shared memory, CUDA memory).
    if (!job->keep_result && job->shm_out.empty() && job->device_out == nullptr) {
      data->resize(job->out_bytes());
    }
    marks.mark("quota+reply_alloc");
    const std::span<std::byte> out = job->shm_out.empty() ? as_span(*data) : job->shm_out;
    if (absl::Status s =
            runtime_.multiply(*job, request->variant(), out, waiter_of(*context), outcome);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = regions_intact(job->regions); !s.ok()) return s;
    if (outcome.result != nullptr) {
      if (absl::Status s = abandoned(*context, "its result", received); !s.ok()) return s;
      runtime_.publish(outcome.result);
      fill_resident(*outcome.result, reply->mutable_result());
    }
    marks.mark("publish");
    outcome.times.total_us = micros_since(received);
    reply->set_precision(rec.precision);
    reply->set_gflops(outcome.rate());
    report_outcome(outcome, *reply, rec);
    rec.merged_requests = outcome.merged_requests;
    rec.batch_wait_us = outcome.times.batch_wait_us;
    return absl::OkStatus();
  }();
  grpc::Status done = finish_rpc(status, *reply, rec, received);
  marks.mark("metrics");
  runtime_.trace().record(marks);
  return done;
}

grpc::Status MatrixServiceImpl::MultiplyBatched(grpc::ServerContext* context,
                                                const v1::MultiplyBatchedRequest* request,
                                                v1::MultiplyBatchedReply* reply) {
  const absl::Time received = absl::Now();
  const std::size_t request_bytes = request->ByteSizeLong();
  const CallScope call = begin_call(request_bytes >= CpuKeepAwake::kHeavyCallBytes);
  RequestRecord rec{.rpc = "MultiplyBatched",
                    .op = "gemm",
                    .variant = "none",
                    .precision = "none",
                    .device = "none"};
  rec.bytes_received = static_cast<std::int64_t>(request_bytes);
  Outcome outcome;
  StageMarks& marks = outcome.marks;
  const bool resident = request->keep_result() || !request->a_handles().empty() ||
                        !request->b_handles().empty() || !request->c_handles().empty();
  if (runtime_.trace().enabled()) {
    marks.start(resident ? "gemm batched resident" : "gemm batched inline");
  }
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner =
        gate_.authorize_compute(*context, resident, "MultiplyBatched");
    if (!owner.ok()) return owner.status();
    marks.mark("authorize");
    const RegionResolver regions = gate_.regions(*owner);
    absl::StatusOr<GemmBatchJob> batch =
        validate_multiply_batched(*request, limits_, gate_.handles(*owner), &regions);
    if (!batch.ok()) return batch.status();
    GemmJob& shape = batch->shape;
    shape.owner = *owner;
    marks.mark("validate");
    if (marks.enabled()) {
      marks.relabel(absl::StrCat(marks.label(), " ", shape.m(), "x", shape.n(), "x", shape.k(),
                                 " x", batch->count));
    }
    const std::size_t all_bytes = shape.out_bytes() * static_cast<std::size_t>(batch->count);
    absl::StatusOr<QuotaReservation> quota =
        gate_.reserve_quota(*owner, shape.keep_result ? all_bytes : 0);
    if (!quota.ok()) return quota.status();
    rec.precision = std::string(kernels::precision_name(shape.precision));
    rec.problem_size = static_cast<double>(shape.m()) * static_cast<double>(shape.n()) *
                       static_cast<double>(shape.k()) * static_cast<double>(batch->count);
    if (absl::Status s = cancelled_or_expired(*context); !s.ok()) return s;
    v1::Matrix* c = reply->mutable_c();
    c->set_rows(shape.m());
    c->set_cols(shape.n());
    c->set_batch(batch->count);
    c->set_dtype(to_proto(shape.out_dtype));
    c->set_layout(request->output_layout());
    if (!shape.keep_result && shape.shm_out.empty()) {
      std::string* data = c->mutable_data();
      data->resize(all_bytes);
      batch->outs = {as_span(*data)};
    }
    marks.mark("quota+reply_alloc");
    if (absl::Status s =
            runtime_.multiply_batch(*batch, request->variant(), waiter_of(*context), outcome);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = regions_intact(shape.regions); !s.ok()) return s;
    if (!outcome.results.empty()) {
      if (absl::Status s = abandoned(*context, "its results", received); !s.ok()) return s;
      for (const std::shared_ptr<ResidentMatrix>& r : outcome.results) {
        runtime_.publish(r);
        fill_resident(*r, reply->add_results());
      }
    }
    marks.mark("publish");
    outcome.times.total_us = micros_since(received);
    reply->set_precision(rec.precision);
    reply->set_gflops(outcome.rate());
    report_outcome(outcome, *reply, rec);
    rec.products = batch->count;
    return absl::OkStatus();
  }();
  grpc::Status done = finish_rpc(status, *reply, rec, received);
  marks.mark("metrics");
  runtime_.trace().record(marks);
  return done;
}

grpc::Status MatrixServiceImpl::Transpose(grpc::ServerContext* context,
                                          const v1::TransposeRequest* request,
                                          v1::TransposeReply* reply) {
  const absl::Time received = absl::Now();
  const std::size_t request_bytes = request->ByteSizeLong();
  const CallScope call = begin_call(request_bytes >= CpuKeepAwake::kHeavyCallBytes);
  RequestRecord rec{.rpc = "Transpose",
                    .op = "transpose",
                    .variant = "none",
                    .precision = "none",
                    .device = "none"};
  rec.bytes_received = static_cast<std::int64_t>(request_bytes);
  Outcome outcome;
  StageMarks& marks = outcome.marks;
  const bool resident = request->keep_result() || !request->a_handle().empty();
  if (runtime_.trace().enabled()) marks.start(resident ? "transpose resident" : "transpose inline");
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner = gate_.authorize_compute(*context, resident, "Transpose");
    if (!owner.ok()) return owner.status();
    marks.mark("authorize");
    const RegionResolver regions = gate_.regions(*owner);
    absl::StatusOr<TransposeJob> job =
        validate_transpose(*request, limits_, gate_.handles(*owner), &regions);
    if (!job.ok()) return job.status();
    job->owner = *owner;
    marks.mark("validate");
    if (marks.enabled()) {
      marks.relabel(absl::StrCat(marks.label(), " ", job->a.rows, "x", job->a.cols));
    }
    absl::StatusOr<QuotaReservation> quota =
        gate_.reserve_quota(*owner, job->keep_result ? job->out_bytes() : 0);
    if (!quota.ok()) return quota.status();
    rec.precision = std::string(kernels::dtype_name(job->a.dtype));
    rec.problem_size = static_cast<double>(job->a.rows) * static_cast<double>(job->a.cols);
    if (absl::Status s = cancelled_or_expired(*context); !s.ok()) return s;
    v1::Matrix* b = reply->mutable_b();
    b->set_rows(job->a.cols);
    b->set_cols(job->a.rows);
    b->set_dtype(to_proto(job->a.dtype));
    b->set_layout(job->a.layout == kernels::Layout::kRowMajor ? v1::ROW_MAJOR : v1::COL_MAJOR);
    std::string* data = b->mutable_data();
    if (!job->keep_result && !job->in_place && job->shm_out.empty() && job->device_out == nullptr) {
      data->resize(job->out_bytes());
    }
    marks.mark("quota+reply_alloc");
    const std::span<std::byte> out = job->shm_out.empty() ? as_span(*data) : job->shm_out;
    if (absl::Status s =
            runtime_.transpose(*job, request->variant(), out, waiter_of(*context), outcome);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = regions_intact(job->regions); !s.ok()) return s;
    if (outcome.result != nullptr) {
      if (!job->in_place) {
        if (absl::Status s = abandoned(*context, "its result", received); !s.ok()) return s;
        runtime_.publish(outcome.result);
      }
      job->locks.clear();  // fill_resident reads the shape under the matrix's own lock
      fill_resident(*outcome.result, reply->mutable_result());
    }
    marks.mark("publish");
    outcome.times.total_us = micros_since(received);
    reply->set_gb_per_s(outcome.rate());
    report_outcome(outcome, *reply, rec);
    return absl::OkStatus();
  }();
  grpc::Status done = finish_rpc(status, *reply, rec, received);
  marks.mark("metrics");
  runtime_.trace().record(marks);
  return done;
}

grpc::Status MatrixServiceImpl::ListKernels(grpc::ServerContext* context,
                                            const v1::ListKernelsRequest* /*request*/,
                                            v1::ListKernelsReply* reply) {
  if (absl::StatusOr<std::string> who = gate_.authorize(*context, Permission::kInfo, "ListKernels");
      !who.ok()) {
    return to_grpc(who.status());
  }
  const kernels::Backend mine = runtime_.backend().kind();
  for (const kernels::GemmVariant& v : kernels::gemm_variants()) {
    if (v.backend != mine) continue;
    v1::KernelInfo* k = reply->add_kernels();
    k->set_name(std::string(v.name));
    k->set_family(std::string(v.family));
    k->set_operation(v1::GEMM);
    for (kernels::Precision p :
         {kernels::Precision::kF64, kernels::Precision::kF32, kernels::Precision::kTF32,
          kernels::Precision::kF16, kernels::Precision::kBF16, kernels::Precision::kF8}) {
      if (v.supports(p)) k->add_precisions(std::string(kernels::precision_name(p)));
    }
    k->set_constraints(std::string(v.constraints));
    k->set_description(std::string(v.description));
    k->set_backend(std::string(kernels::backend_name(v.backend)));
    k->set_batched(v.batched);
  }
  for (const kernels::TransposeVariant& v : kernels::transpose_variants()) {
    if (v.backend != mine) continue;
    v1::KernelInfo* k = reply->add_kernels();
    k->set_name(std::string(v.name));
    k->set_family(std::string(v.family));
    k->set_operation(v1::TRANSPOSE);
    for (const char* p : {"fp64", "fp32", "fp16", "bf16"}) k->add_precisions(p);
    std::string constraints(v.constraints);
    if (v.in_place) {
      constraints = constraints.empty()
                        ? "in-place: resident matrices only"
                        : absl::StrCat("in-place: resident matrices only; ", constraints);
    }
    k->set_constraints(constraints);
    k->set_description(std::string(v.description));
    k->set_backend(std::string(kernels::backend_name(v.backend)));
  }
  RequestRecord rec{.rpc = "ListKernels",
                    .op = "info",
                    .variant = "none",
                    .precision = "none",
                    .device = "none",
                    .code = "OK"};
  rec.bytes_sent = static_cast<std::int64_t>(reply->ByteSizeLong());
  metrics_.record(rec);
  return grpc::Status::OK;
}

grpc::Status MatrixServiceImpl::GetServerInfo(grpc::ServerContext* context,
                                              const v1::GetServerInfoRequest* /*request*/,
                                              v1::GetServerInfoReply* reply) {
  if (absl::StatusOr<std::string> who =
          gate_.authorize(*context, Permission::kInfo, "GetServerInfo");
      !who.ok()) {
    return to_grpc(who.status());
  }
  reply->set_version(kVersion);
  reply->set_git_sha(kGitSha);
  reply->set_replica_id(runtime_.residents().replica_id());
  reply->set_backend(std::string(kernels::backend_name(runtime_.backend().kind())));
  for (const DeviceDescription& d : runtime_.backend().devices()) {
    fill_device(d, reply->add_devices());
  }
  v1::ServerLimits* l = reply->mutable_limits();
  l->set_max_message_bytes(limits_.max_message_bytes);
  l->set_max_dimension(limits_.max_dimension);
  l->set_max_matrix_bytes(limits_.max_matrix_bytes);
  const std::vector<DeviceStats> stats = runtime_.backend().stats();
  if (!stats.empty()) l->set_memory_budget_bytes(stats[0].pool.budget_bytes);
  l->set_resident_ttl_ms(absl::ToInt64Milliseconds(runtime_.residents().ttl()));
  l->set_shared_memory(limits_.shared_memory);
  l->set_max_batch_products(limits_.max_batch_products);
  l->set_max_batch_size(limits_.max_batch_size > 1 ? limits_.max_batch_size : 0);
  l->set_max_batch_delay_us(limits_.max_batch_delay_us);
  l->set_max_range_bytes(limits_.max_range_bytes());
  l->set_max_shm_regions_per_owner(limits_.max_shm_regions_per_owner);
  l->set_max_shared_memory_bytes_per_owner(limits_.max_shared_memory_bytes_per_owner);
  l->set_max_shared_memory_bytes(limits_.max_shared_memory_bytes);
  RequestRecord rec{.rpc = "GetServerInfo",
                    .op = "info",
                    .variant = "none",
                    .precision = "none",
                    .device = "none",
                    .code = "OK"};
  rec.bytes_sent = static_cast<std::int64_t>(reply->ByteSizeLong());
  metrics_.record(rec);
  return grpc::Status::OK;
}

}  // namespace matserve::server
