// A transpose on a CUDA device through the execution plan: out of place, or in place on a
// resident matrix. A rectangular matrix "in place" is transposed out of place into a new block
// when the budget has room (moving each byte once instead of about twice), and that block then
// replaces the matrix's own; a variant that wants scratch memory borrows it from the pool.
#include <cuda_runtime_api.h>

#include <optional>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_status.h"
#include "server/runtime/cuda_operation.h"
#include "server/runtime/problem_builder.h"
#include "server/runtime/resident_store.h"

namespace matserve::server {
namespace {

using kernels::cuda_status;

class CudaTranspose : public CudaOperation {
 public:
  CudaTranspose(const CudaOperationContext& context, const TransposeJob& job,
                const TransposeChooser& choose, std::span<std::byte> out)
      : CudaOperation(context), job_(job), choose_(choose), out_(out) {}

  absl::StatusOr<DeviceScheduler*> pick() {
    const Operand* operands[] = {&job_.a};
    return pick_device(operands, job_.device_out.get());
  }

  void plan_memory(BlockPlan& plan) {
    inline_a_ = plan.add_if(!job_.a.is_resident(), job_.a.bytes());
    result_ = plan.add_if(!job_.in_place, job_.out_bytes(), job_.keep_result);
  }

  absl::Status choose(AdmittedMemory& memory) {
    if (absl::Status s = bind_slot(memory); !s.ok()) return s;
    in_ = inline_a_ ? memory.data(*inline_a_) : job_.a.resident->block.data();
    dst_ = result_ ? memory.data(*result_) : in_;
    problem_ = transpose_problem(job_, in_, dst_);
    absl::StatusOr<const kernels::TransposeVariant*> v = choose_(problem_);
    if (job_.in_place && (job_.a.rows != job_.a.cols || !v.ok())) {
      // A rectangular matrix transposed within its own memory moves each byte about twice (the
      // staged sweep reaches half of copy bandwidth). With room in the budget for a second copy,
      // "in place" is done as a user sees it: transposed out of place into a new block, which then
      // replaces the matrix's block under the exclusive lock the job holds. Not when the request
      // names an in-place variant (it refuses the out-of-place problem).
      if (absl::StatusOr<MemoryPool::Block> b = device_->pool->allocate(job_.out_bytes(), true);
          b.ok()) {
        const kernels::TransposeProblem q = transpose_problem(job_, in_, b->data());
        if (absl::StatusOr<const kernels::TransposeVariant*> w = choose_(q); w.ok()) {
          replacement_ = *std::move(b);
          dst_ = replacement_.data();
          problem_ = q;
          v = w;
        }
      }
    }
    if (!v.ok()) return v.status();
    variant_ = *v;
    context_exec_ = slot_->resources.context();
    if (variant_->preferred_workspace_bytes != nullptr) {
      // E.g. the in-place rectangular sweep, best with about half the matrix as scratch: lent from
      // the pool when the budget has room, else the variant makes do with the stream's workspace.
      const std::size_t want = variant_->preferred_workspace_bytes(problem_);
      if (want > context_exec_.workspace_bytes) {
        if (absl::StatusOr<MemoryPool::Block> b = device_->pool->allocate(want); b.ok()) {
          scratch_ = *std::move(b);
          context_exec_.workspace = scratch_.data();
          context_exec_.workspace_bytes = scratch_.size();
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status stage_in() {
    if (!inline_a_) return absl::OkStatus();
    cudaEventRecord(events().copy_in_begin.get(), stream_);
    if (absl::Status s =
            slot_->staging.to_device(in_, job_.a.data.data(), job_.a.bytes(), stream_, copier());
        !s.ok()) {
      return s;
    }
    cudaEventRecord(events().copy_in_end.get(), stream_);
    return absl::OkStatus();
  }

  absl::Status launch(Outcome& outcome) {
    const auto work = [this] { return variant_->launch(problem_, context_exec_); };
    kernels::LaunchKey key;
    key.add(variant_->name)
        .add(problem_)
        .add(context_exec_.workspace)
        .add(context_exec_.workspace_bytes);
    return launch_device_work(&key, work, outcome);
  }

  absl::Status stage_out(Outcome& outcome) {
    return copy_result_out(dst_, job_.out_bytes(), job_.device_out.get(), out_,
                           !job_.keep_result && !job_.in_place, outcome);
  }

  void record(Outcome& outcome) {
    record_device_times(inline_a_.has_value(), outcome);
    outcome.variant = std::string(variant_->name);
    outcome.device = device_->display_name;
    outcome.work = kernels::transpose_bytes(problem_);
  }

  void keep(AdmittedMemory& memory, Outcome& outcome) {
    outcome.replacement_block = std::move(replacement_);  // the runtime swaps it in
    if (job_.keep_result && result_) {
      outcome.result = make_resident(memory.take(*result_), job_.a.cols, job_.a.rows, job_.a.dtype,
                                     job_.a.layout, job_.owner, device_->index, device_->label);
    }
  }

 private:
  const TransposeJob& job_;
  const TransposeChooser& choose_;
  const std::span<std::byte> out_;

  std::optional<BlockId> inline_a_;  // where an inline A lands
  std::optional<BlockId> result_;    // out of place: the result

  void* in_ = nullptr;
  void* dst_ = nullptr;
  kernels::TransposeProblem problem_;
  const kernels::TransposeVariant* variant_ = nullptr;
  kernels::ExecContext context_exec_;  // the stream's, or with borrowed scratch
  // Memory from the pool outside the admission, freed with the operation (after its stream work):
  MemoryPool::Block replacement_;  // in place done out of place: the result, replacing A's block
  MemoryPool::Block scratch_;      // a larger workspace for the variant
};

}  // namespace

absl::Status run_cuda_transpose(const CudaOperationContext& context, const TransposeJob& job,
                                const TransposeChooser& choose, std::span<std::byte> out,
                                const Waiter& waiter, Outcome& outcome) {
  CudaTranspose op(context, job, choose, out);
  return execute(op, waiter, outcome);
}

}  // namespace matserve::server
