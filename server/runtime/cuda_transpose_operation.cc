// A transpose on a CUDA device through the execution plan: out of place, or in place on a
// resident matrix. A rectangular matrix "in place" is transposed out of place into a new block
// when the budget has room (moving each byte once instead of about twice), and that block then
// replaces the matrix's own; a variant that wants more scratch than the stream's workspace gets it
// when the budget has room. Both are blocks of the plan that admission takes only if there is room.
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

  // An in-place problem is exact before admission (it reads and writes the resident block), so
  // what an in-place run would use is known here: the variant it gets, and the scratch that
  // variant prefers. Declared as blocks the run can do without (admitted when there is room):
  // - the replacement: the result's new block, for a rectangular matrix (transposed within its
  //   own memory it moves each byte about twice; the staged sweep reaches half of copy
  //   bandwidth), or when no variant does the in-place problem (e.g. the request names an
  //   out-of-place one). "In place" is then done as a user sees it: out of place into the new
  //   block, which replaces the matrix's block under the exclusive lock the job holds;
  // - the scratch: for the in-place variant, when it prefers more than the stream's workspace
  //   (e.g. the rectangular sweep, best with about half the matrix), else it makes do with that.
  void plan_memory(BlockPlan& plan) {
    inline_a_ = plan.add_if(!job_.a.is_resident(), job_.a.bytes());
    result_ = plan.add_if(!job_.in_place, job_.out_bytes(), job_.keep_result);
    if (!job_.in_place) return;
    void* a = job_.a.resident->block.data();
    in_place_problem_ = transpose_problem(job_, a, a);
    in_place_choice_ = choose_(in_place_problem_);
    const bool square = job_.a.rows == job_.a.cols;
    replacement_ = plan.add_if_room(!square || !in_place_choice_.ok(), job_.out_bytes(),
                                    /*long_lived=*/true);
    const std::size_t want = preferred_workspace(in_place_choice_, in_place_problem_);
    scratch_ =
        plan.add_if_room(want > device_->slots.front().resources.context().workspace_bytes, want);
  }

  absl::Status choose(AdmittedMemory& memory) {
    if (absl::Status s = bind(memory); !s.ok()) return s;
    if (!job_.in_place) {
      problem_ = transpose_problem(job_, in_, dst_);
      absl::StatusOr<const kernels::TransposeVariant*> v = choose_(problem_);
      if (!v.ok()) return v.status();
      variant_ = *v;
      return absl::OkStatus();
    }
    // In place done out of place into the replacement, when admitted and a variant does that
    // problem (not when the request names an in-place variant: it refuses it).
    if (replacement_ && memory.has(*replacement_)) {
      void* into = memory.data(*replacement_);
      const kernels::TransposeProblem q = transpose_problem(job_, in_, into);
      if (absl::StatusOr<const kernels::TransposeVariant*> w = choose_(q); w.ok()) {
        replacement_used_ = true;
        dst_ = into;
        problem_ = q;
        variant_ = *w;
        if (scratch_) memory.release(*scratch_);  // for the in-place variant only
        return absl::OkStatus();
      }
      memory.release(*replacement_);
    }
    if (!in_place_choice_.ok()) return in_place_choice_.status();
    problem_ = in_place_problem_;
    variant_ = *in_place_choice_;
    if (scratch_ && memory.has(*scratch_)) {
      context_exec_.workspace = memory.data(*scratch_);
      context_exec_.workspace_bytes = preferred_workspace(in_place_choice_, problem_);
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
    // The runtime swaps it in (the device work on it is finished).
    if (replacement_used_) outcome.replacement_block = memory.take(*replacement_);
    if (job_.keep_result && result_) {
      outcome.result = make_resident(memory.take(*result_), job_.a.cols, job_.a.rows, job_.a.dtype,
                                     job_.a.layout, job_.owner, device_->index, device_->label);
    }
  }

 private:
  // Takes the stream slot; where A is on the device (an inline A's block, else the resident
  // block) and where the result goes (its block out of place, A's own block in place).
  absl::Status bind(AdmittedMemory& memory) {
    if (absl::Status s = bind_slot(memory); !s.ok()) return s;
    in_ = inline_a_ ? memory.data(*inline_a_) : job_.a.resident->block.data();
    dst_ = result_ ? memory.data(*result_) : in_;
    context_exec_ = slot_->resources.context();
    return absl::OkStatus();
  }

  // The scratch `choice` prefers for `p`, 0 if none (or no choice).
  static std::size_t preferred_workspace(
      const absl::StatusOr<const kernels::TransposeVariant*>& choice,
      const kernels::TransposeProblem& p) {
    if (!choice.ok() || (*choice)->preferred_workspace_bytes == nullptr) return 0;
    return (*choice)->preferred_workspace_bytes(p);
  }

  const TransposeJob& job_;
  const TransposeChooser& choose_;
  const std::span<std::byte> out_;

  std::optional<BlockId> inline_a_;     // where an inline A lands
  std::optional<BlockId> result_;       // out of place: the result
  std::optional<BlockId> replacement_;  // in place done out of place: the result, replacing A's
  std::optional<BlockId> scratch_;      // in place: a larger workspace for the variant

  kernels::TransposeProblem in_place_problem_;  // in place: A's block read and written
  absl::StatusOr<const kernels::TransposeVariant*> in_place_choice_ =
      absl::FailedPreconditionError("not in place");
  bool replacement_used_ = false;
  void* in_ = nullptr;
  void* dst_ = nullptr;
  kernels::TransposeProblem problem_;
  const kernels::TransposeVariant* variant_ = nullptr;
  kernels::ExecContext context_exec_;  // the stream's, or with the scratch block
};

}  // namespace

absl::Status run_cuda_transpose(const CudaOperationContext& context, const TransposeJob& job,
                                const TransposeChooser& choose, std::span<std::byte> out,
                                const Waiter& waiter, Outcome& outcome) {
  CudaTranspose op(context, job, choose, out);
  return execute(op, waiter, outcome);
}

}  // namespace matserve::server
