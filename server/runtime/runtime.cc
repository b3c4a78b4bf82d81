// Runtime façade: see runtime.h.
#include "server/runtime/runtime.h"

#include <utility>

#include "kernels/cpu/reference.h"
#include "kernels/precision.h"
#include "server/runtime/problem_builder.h"

namespace matserve::server {

Runtime::Runtime(std::unique_ptr<Backend> backend, TunedChoice tuned)
    : backend_(std::move(backend)) {
  selection_.backend = backend_->kind();
  selection_.tuned = std::move(tuned);
}

absl::Status Runtime::multiply(const GemmJob& job, std::string_view variant,
                               std::span<std::byte> out, absl::Time deadline, Outcome& outcome) {
  // The kernel sees converted operands on the GPU (fp32 data computed in fp16/bf16); the CPU
  // variant rounds internally and takes the data as it is.
  const kernels::DType operand = backend_->kind() == kernels::Backend::kCuda
                                     ? kernels::kernel_operand_dtype(job.a.dtype, job.precision)
                                     : job.a.dtype;
  const void* c0 = job.c.has_value() ? job.c->data.data() : nullptr;
  kernels::GemmProblem shape =
      gemm_problem(job, operand, job.a.data.data(), job.b.data.data(), out.data());
  absl::StatusOr<const kernels::GemmVariant*> v = select_gemm_variant(variant, shape, selection_);
  if (!v.ok()) return v.status();
  if (absl::Status s = backend_->multiply(job, **v, out, deadline, outcome); !s.ok()) return s;
  if (job.verify) {
    const kernels::GemmProblem host =
        gemm_problem(job, job.a.dtype, job.a.data.data(), job.b.data.data(), out.data());
    const std::vector<double> ref = kernels::reference_gemm(host, c0);
    outcome.verification =
        kernels::compare_with_reference(out.data(), job.out_dtype, host.m, host.n, host.ldc, ref);
  }
  return absl::OkStatus();
}

absl::Status Runtime::transpose(const TransposeJob& job, std::string_view variant,
                                std::span<std::byte> out, absl::Time deadline, Outcome& outcome) {
  const kernels::TransposeProblem shape = transpose_problem(job, job.a.data.data(), out.data());
  absl::StatusOr<const kernels::TransposeVariant*> v =
      select_transpose_variant(variant, shape, selection_);
  if (!v.ok()) return v.status();
  if (absl::Status s = backend_->transpose(job, **v, out, deadline, outcome); !s.ok()) return s;
  if (job.verify) {
    const std::vector<double> ref = kernels::reference_transpose(shape);
    outcome.verification = kernels::compare_with_reference(out.data(), job.a.dtype, shape.cols,
                                                           shape.rows, shape.ld_out, ref);
  }
  return absl::OkStatus();
}

}  // namespace matserve::server
