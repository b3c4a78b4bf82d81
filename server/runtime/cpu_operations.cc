// The CPU operations through the execution plan: see cpu_operations.h.
#include "server/runtime/cpu_operations.h"

#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/time/clock.h"
#include "server/runtime/batch_placement.h"
#include "server/runtime/execution_plan.h"
#include "server/runtime/problem_builder.h"
#include "server/runtime/resident_store.h"

namespace matserve::server {
namespace {

double work_of(const kernels::GemmProblem& p) {
  return kernels::gemm_flops(p);
}
double work_of(const kernels::TransposeProblem& p) {
  return kernels::transpose_bytes(p);
}

// The steps every CPU operation shares: one device (the host), the chosen variant run on the
// calling thread while the execution slot is held, nothing to wait for or to copy out.
template <typename Problem, typename Variant>
class CpuOperation {
 public:
  absl::StatusOr<DeviceScheduler*> pick() { return &scheduler_; }
  absl::Status stage_in() { return absl::OkStatus(); }
  absl::Status launch(Outcome& outcome) {
    if constexpr (std::is_same_v<Problem, kernels::GemmProblem>) {
      // fp8 of wider data: the dequant scales the product quantizes with, into the outcome.
      if (kernels::quantizes_to_fp8(problem_)) {
        outcome.fp8_scales.assign(2 * static_cast<std::size_t>(problem_.batch.count), 1.0f);
        problem_.fp8_scales_out = outcome.fp8_scales.data();
      }
    }
    const absl::Time start = absl::Now();
    if (absl::Status s = variant_->launch(problem_, kernels::ExecContext{}); !s.ok()) return s;
    outcome.times.kernel_us = micros_since(start);
    return absl::OkStatus();
  }
  absl::Status wait_kernel() { return absl::OkStatus(); }  // the run was synchronous
  absl::Status stage_out(Outcome& /*outcome*/) { return absl::OkStatus(); }
  void record(Outcome& outcome) {
    outcome.variant = std::string(variant_->name);
    outcome.device = "cpu";
    outcome.work = work_of(problem_);
  }
  void abandon() {}

 protected:
  explicit CpuOperation(DeviceScheduler& scheduler) : scheduler_(scheduler) {}

  // The variant for problem_, which the operation's bind() settled.
  template <typename Chooser>
  absl::Status choose_variant(const Chooser& choose) {
    absl::StatusOr<const Variant*> v = choose(problem_);
    if (!v.ok()) return v.status();
    variant_ = *v;
    return absl::OkStatus();
  }

  DeviceScheduler& scheduler_;
  Problem problem_;
  const Variant* variant_ = nullptr;
};

class CpuGemm : public CpuOperation<kernels::GemmProblem, kernels::GemmVariant> {
 public:
  CpuGemm(DeviceScheduler& scheduler, const GemmJob& job, const GemmChooser& choose,
          std::span<std::byte> out)
      : CpuOperation(scheduler), job_(job), choose_(choose), out_(out) {}

  void plan_memory(BlockPlan& plan) {
    kept_ = plan.add_if(job_.keep_result, job_.out_bytes(), /*long_lived=*/true);
  }
  absl::Status choose(AdmittedMemory& memory) {
    bind(memory);
    return choose_variant(choose_);
  }
  absl::Status stage_in() {
    if (job_.c.has_value() && job_.beta != 0.0) {
      std::memcpy(c_, operand_bytes(*job_.c), job_.out_bytes());
    }
    return absl::OkStatus();
  }
  void keep(AdmittedMemory& memory, Outcome& outcome) {
    if (!kept_) return;
    outcome.result = make_resident(memory.take(*kept_), job_.m(), job_.n(), job_.out_dtype,
                                   job_.out_layout, job_.owner, 0, "cpu");
  }

 private:
  // The result in its kept block, else where the reply wants it; the operands where they are.
  void bind(AdmittedMemory& memory) {
    c_ = kept_ ? memory.data(*kept_) : out_.data();
    problem_ = gemm_problem(job_, job_.a.dtype, operand_bytes(job_.a), operand_bytes(job_.b), c_);
  }

  const GemmJob& job_;
  const GemmChooser& choose_;
  const std::span<std::byte> out_;
  std::optional<BlockId> kept_;  // keep_result: the result's block
  void* c_ = nullptr;
};

class CpuGemmBatch : public CpuOperation<kernels::GemmProblem, kernels::GemmVariant> {
 public:
  CpuGemmBatch(DeviceScheduler& scheduler, const GemmBatchJob& job, const GemmChooser& choose)
      : CpuOperation(scheduler), job_(job), choose_(choose) {}

  void plan_memory(BlockPlan& plan) {
    if (!job_.shape.keep_result) return;
    for (std::size_t i = 0; i < job_.kept_blocks(); ++i) {
      kept_.push_back(plan.add(job_.kept_block_bytes(), /*long_lived=*/true));
    }
  }
  absl::Status choose(AdmittedMemory& memory) {
    bind(memory);
    return choose_variant(choose_);
  }
  absl::Status stage_in() {
    if (job_.shape.beta == 0.0) return absl::OkStatus();
    for (std::int64_t i = 0; i < job_.count; ++i) {
      if (const Operand* c0 = job_.c_of(i); c0 != nullptr) {
        std::memcpy(ptrs_.c[static_cast<std::size_t>(i)], operand_bytes(*c0),
                    job_.shape.out_bytes());
      }
    }
    return absl::OkStatus();
  }
  void keep(AdmittedMemory& memory, Outcome& outcome) {
    const GemmShape& shape = job_.shape;
    const auto [rows, cols] = job_.kept_dims();
    for (BlockId id : kept_) {
      outcome.results.push_back(make_resident(memory.take(id), rows, cols, shape.out_dtype,
                                              shape.out_layout, shape.owner, 0, "cpu"));
    }
  }

 private:
  // Host memory: a strided batch where the matrices are evenly spaced, else pointer arrays read
  // where they are.
  void bind(AdmittedMemory& memory) {
    const GemmShape& shape = job_.shape;
    for (const Operand& a : job_.a) ptrs_.a.push_back(operand_bytes(a));
    for (const Operand& b : job_.b) ptrs_.b.push_back(operand_bytes(b));
    for (std::int64_t i = 0; i < job_.count; ++i) {
      if (shape.keep_result) {
        const auto [block, offset] = job_.kept_place(i);
        ptrs_.c.push_back(static_cast<std::byte*>(memory.data(kept_[block])) + offset);
      } else {
        ptrs_.c.push_back(job_.out_of(i).data());
      }
    }
    const std::optional<kernels::GemmBatch> strided = strided_batch(
        ptrs_, kernels::dtype_size(shape.a.dtype), kernels::dtype_size(shape.out_dtype));
    if (!strided.has_value()) arrays_ = pointer_arrays(ptrs_);
    const kernels::GemmBatch batch =
        strided.has_value() ? *strided : arrays_.placed_at(arrays_.host.data());
    problem_ = gemm_problem(shape, shape.a.dtype, ptrs_.a[0], ptrs_.b[0], ptrs_.c[0], batch);
  }

  const GemmBatchJob& job_;
  const GemmChooser& choose_;
  std::vector<BlockId> kept_;  // keep_result: one block per product
  ProductPointers ptrs_;
  PointerArrays arrays_;  // when the matrices are not evenly spaced
};

class CpuTranspose : public CpuOperation<kernels::TransposeProblem, kernels::TransposeVariant> {
 public:
  CpuTranspose(DeviceScheduler& scheduler, const TransposeJob& job, const TransposeChooser& choose,
               std::span<std::byte> out)
      : CpuOperation(scheduler), job_(job), choose_(choose), out_(out) {}

  void plan_memory(BlockPlan& plan) {
    kept_ = plan.add_if(job_.keep_result, job_.out_bytes(), /*long_lived=*/true);
  }
  absl::Status choose(AdmittedMemory& memory) {
    bind(memory);
    return choose_variant(choose_);
  }
  void keep(AdmittedMemory& memory, Outcome& outcome) {
    if (!kept_) return;
    outcome.result = make_resident(memory.take(*kept_), job_.a.cols, job_.a.rows, job_.a.dtype,
                                   job_.a.layout, job_.owner, 0, "cpu");
  }

 private:
  // The result in A's own block (in place), its kept block, or where the reply wants it.
  void bind(AdmittedMemory& memory) {
    void* dst = job_.in_place ? job_.a.resident->block.data()
                : kept_       ? memory.data(*kept_)
                              : out_.data();
    problem_ = transpose_problem(job_, operand_bytes(job_.a), dst);
  }

  const TransposeJob& job_;
  const TransposeChooser& choose_;
  const std::span<std::byte> out_;
  std::optional<BlockId> kept_;  // keep_result: the result's block
};

}  // namespace

absl::Status run_cpu_gemm(DeviceScheduler& scheduler, const GemmJob& job, const GemmChooser& choose,
                          std::span<std::byte> out, const Waiter& waiter, Outcome& outcome) {
  CpuGemm op(scheduler, job, choose, out);
  return execute(op, waiter, outcome);
}

absl::Status run_cpu_gemm_batch(DeviceScheduler& scheduler, const GemmBatchJob& job,
                                const GemmChooser& choose, const Waiter& waiter, Outcome& outcome) {
  CpuGemmBatch op(scheduler, job, choose);
  return execute(op, waiter, outcome);
}

absl::Status run_cpu_transpose(DeviceScheduler& scheduler, const TransposeJob& job,
                               const TransposeChooser& choose, std::span<std::byte> out,
                               const Waiter& waiter, Outcome& outcome) {
  CpuTranspose op(scheduler, job, choose, out);
  return execute(op, waiter, outcome);
}

}  // namespace matserve::server
