// MatrixService handlers: see matrix_service.h.
#include "server/service/matrix_service.h"

#include <optional>
#include <span>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/registry.h"
#include "matserve/version.h"
#include "server/service/compute_call.h"
#include "server/service/proto_convert.h"
#include "server/service/service_context.h"
#include "server/service/status_mapping.h"
#include "server/service/validation.h"

namespace matserve::server {
namespace {

// What a transpose lists as its precisions: the element types it moves, named as precisions
// (tf32 is a way of computing fp32, not a type; no transpose lists fp8).
constexpr kernels::PrecisionSet kTransposePrecisions =
    kernels::kEveryPrecisionButF8 & ~kernels::precision_bit(kernels::Precision::kTF32);

// `set`'s precisions in the order of kEveryPrecision.
void add_precisions(kernels::PrecisionSet set, v1::KernelInfo* k) {
  for (kernels::Precision p : kernels::kEveryPrecision) {
    if ((set & kernels::precision_bit(p)) != 0) {
      k->add_precisions(std::string(kernels::precision_name(p)));
    }
  }
}

}  // namespace

MatrixServiceImpl::MatrixServiceImpl(Runtime& runtime, Metrics& metrics,
                                     const ServiceLimits& limits, const Authenticator& auth,
                                     CpuKeepAwake* keep_awake)
    : runtime_(runtime),
      metrics_(metrics),
      limits_(limits),
      keep_awake_(keep_awake),
      gate_(runtime_, limits_, auth) {}

namespace {

// The scales a request gives its e4m3 data (1 where it gives none).
template <typename Request>
Fp8ScalePair given_scales(const Request& request) {
  return {request.has_a_scale() ? request.a_scale() : 1.0,
          request.has_b_scale() ? request.b_scale() : 1.0};
}

void set_scales(const Fp8ScalePair& s, v1::Fp8Scales* out) {
  out->set_a_scale(s.a);
  out->set_b_scale(s.b);
}

}  // namespace

grpc::Status MatrixServiceImpl::Multiply(grpc::ServerContext* context,
                                         const v1::MultiplyRequest* request,
                                         v1::MultiplyReply* reply) {
  const bool resident = request->keep_result() || !request->a_handle().empty() ||
                        !request->b_handle().empty() || !request->c_handle().empty();
  return compute_call<GemmJob>(
      {.name = "Multiply", .op = "gemm", .kind = "gemm", .resident = resident}, *context, *request,
      *reply,
      ComputeSteps{
          /*validate=*/[&](const HandleResolver& handles, const RegionResolver* regions) {
            return validate_multiply(*request, limits_, handles, regions);
          },
          /*size_reply=*/
          [&](GemmJob& job) {
            v1::Matrix* c = reply->mutable_c();
            c->set_rows(job.m());
            c->set_cols(job.n());
            c->set_dtype(to_proto(job.out_dtype));
            c->set_layout(request->output_layout());
            std::string* data = c->mutable_data();
            // The result in the reply only when it goes nowhere else (kept, shared memory,
            // CUDA memory).
            if (!job.keep_result && job.shm_out.empty() && job.device_out == nullptr) {
              data->resize(job.out_bytes());
            }
            return job.shm_out.empty() ? as_span(*data) : job.shm_out;
          },
          /*run=*/
          [&](GemmJob& job, std::span<std::byte> out, Outcome& outcome) {
            // Looked up by the product only if it would keep a transposed copy (fp8, e4m3 data);
            // the job, and its owner, outlive the call.
            job.copy_room = [this, &owner = job.owner] { return gate_.quota_room(owner); };
            return runtime_.multiply(job, request->variant(), out, waiter_of(*context), outcome);
          },
          /*keep=*/
          [&](GemmJob&, Outcome& outcome, absl::Time received) -> absl::Status {
            if (outcome.result == nullptr) return absl::OkStatus();
            if (absl::Status s = abandoned(*context, "its result", received); !s.ok()) return s;
            runtime_.publish(outcome.result);
            fill_resident(*outcome.result, reply->mutable_result());
            return absl::OkStatus();
          },
          /*fill=*/
          [&](const GemmJob& job, const Outcome& outcome, RequestRecord& rec) {
            reply->set_precision(rec.precision);
            reply->set_gflops(outcome.rate());
            if (job.precision == kernels::Precision::kF8) {
              if (std::optional<Fp8ScalePair> used =
                      fp8_scales_used(job.a.dtype, given_scales(*request), outcome, 0)) {
                set_scales(*used, reply->mutable_fp8_scales());
              }
            }
            rec.merged_requests = outcome.merged_requests;
            rec.batch_wait_us = outcome.times.batch_wait_us;
          },
      });
}

grpc::Status MatrixServiceImpl::MultiplyBatched(grpc::ServerContext* context,
                                                const v1::MultiplyBatchedRequest* request,
                                                v1::MultiplyBatchedReply* reply) {
  const bool resident = request->keep_result() || request->keep_stacked() ||
                        !request->a_handles().empty() || !request->b_handles().empty() ||
                        !request->c_handles().empty() || !request->a_stacked().empty() ||
                        !request->b_stacked().empty() || !request->c_stacked().empty();
  return compute_call<GemmBatchJob>(
      {.name = "MultiplyBatched", .op = "gemm", .kind = "gemm batched", .resident = resident},
      *context, *request, *reply,
      ComputeSteps{
          /*validate=*/[&](const HandleResolver& handles, const RegionResolver* regions) {
            return validate_multiply_batched(*request, limits_, handles, regions);
          },
          /*size_reply=*/
          [&](GemmBatchJob& batch) -> std::span<std::byte> {
            const GemmShape& shape = batch.shape;
            v1::Matrix* c = reply->mutable_c();
            c->set_rows(shape.m());
            c->set_cols(shape.n());
            c->set_batch(batch.count);
            c->set_dtype(to_proto(shape.out_dtype));
            c->set_layout(request->output_layout());
            if (!shape.keep_result && shape.shm_out.empty()) {
              std::string* data = c->mutable_data();
              data->resize(shape.out_bytes() * static_cast<std::size_t>(batch.count));
              batch.outs = {as_span(*data)};
            }
            return {};  // the batch's outs say where each product goes
          },
          /*run=*/
          [&](GemmBatchJob& batch, std::span<std::byte>, Outcome& outcome) {
            return runtime_.multiply_batch(batch, request->variant(), waiter_of(*context), outcome);
          },
          /*keep=*/
          [&](GemmBatchJob&, Outcome& outcome, absl::Time received) -> absl::Status {
            if (outcome.results.empty()) return absl::OkStatus();
            if (absl::Status s = abandoned(*context, "its results", received); !s.ok()) return s;
            for (const std::shared_ptr<ResidentMatrix>& r : outcome.results) {
              runtime_.publish(r);
              fill_resident(*r, reply->add_results());
            }
            return absl::OkStatus();
          },
          /*fill=*/
          [&](const GemmBatchJob& batch, const Outcome& outcome, RequestRecord& rec) {
            reply->set_precision(rec.precision);
            reply->set_gflops(outcome.rate());
            if (batch.shape.precision == kernels::Precision::kF8) {
              for (std::int64_t i = 0; i < batch.count; ++i) {
                std::optional<Fp8ScalePair> used =
                    fp8_scales_used(batch.shape.a.dtype, given_scales(*request), outcome, i);
                if (!used) break;  // not reported: none stated
                set_scales(*used, reply->add_fp8_scales());
              }
            }
            rec.products = batch.count;
          },
      });
}

grpc::Status MatrixServiceImpl::Transpose(grpc::ServerContext* context,
                                          const v1::TransposeRequest* request,
                                          v1::TransposeReply* reply) {
  const bool resident = request->keep_result() || !request->a_handle().empty();
  return compute_call<TransposeJob>(
      {.name = "Transpose", .op = "transpose", .kind = "transpose", .resident = resident}, *context,
      *request, *reply,
      ComputeSteps{
          /*validate=*/[&](const HandleResolver& handles, const RegionResolver* regions) {
            return validate_transpose(*request, limits_, handles, regions);
          },
          /*size_reply=*/
          [&](TransposeJob& job) {
            v1::Matrix* b = reply->mutable_b();
            b->set_rows(job.a.cols);
            b->set_cols(job.a.rows);
            b->set_dtype(to_proto(job.a.dtype));
            b->set_layout(job.a.layout == kernels::Layout::kRowMajor ? v1::ROW_MAJOR
                                                                     : v1::COL_MAJOR);
            std::string* data = b->mutable_data();
            if (!job.keep_result && !job.in_place && job.shm_out.empty() &&
                job.device_out == nullptr) {
              data->resize(job.out_bytes());
            }
            return job.shm_out.empty() ? as_span(*data) : job.shm_out;
          },
          /*run=*/
          [&](TransposeJob& job, std::span<std::byte> out, Outcome& outcome) {
            return runtime_.transpose(job, request->variant(), out, waiter_of(*context), outcome);
          },
          /*keep=*/
          [&](TransposeJob& job, Outcome& outcome, absl::Time received) -> absl::Status {
            if (outcome.result == nullptr) return absl::OkStatus();
            if (!job.in_place) {
              if (absl::Status s = abandoned(*context, "its result", received); !s.ok()) return s;
              runtime_.publish(outcome.result);
            }
            job.locks.clear();  // fill_resident reads the shape under the matrix's own lock
            fill_resident(*outcome.result, reply->mutable_result());
            return absl::OkStatus();
          },
          /*fill=*/
          [&](const TransposeJob&, const Outcome& outcome, RequestRecord&) {
            reply->set_gb_per_s(outcome.rate());
          },
      });
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
    add_precisions(v.precisions, k);
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
    add_precisions(kTransposePrecisions, k);
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
  metrics_.record(std::move(rec));
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
  metrics_.record(std::move(rec));
  return grpc::Status::OK;
}

}  // namespace matserve::server
