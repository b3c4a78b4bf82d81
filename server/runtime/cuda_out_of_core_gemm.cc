// One GEMM on a CUDA device whose operands or result live in host memory, computed out of core
// through the execution plan: tile by tile within the device's budget, per out_of_core_plan.h.
// Three streams overlap: one copies A' pieces, B' blocks (and C's tiles, when beta reads C) into
// their device slots, the slot's stream multiplies each tile (the variant chosen on the tile as it
// runs), and one copies each finished tile to where the result goes (host memory, or a device
// block for a result small enough to stay on the device). Events order them: a load into a slot
// waits for the last tile that read the slot's previous piece, a tile for its loads, a C slot's
// next tile for its previous tile's copy out. The kernel events bracket the whole pipeline, so the
// reply's kernel time includes every copy.
#include <cuda_runtime_api.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/precision.h"
#include "server/runtime/cuda_host_matrices.h"
#include "server/runtime/cuda_operation.h"
#include "server/runtime/cuda_strided_copy.h"
#include "server/runtime/out_of_core_plan.h"
#include "server/runtime/problem_builder.h"
#include "server/runtime/resident_store.h"

namespace matserve::server {
namespace {

absl::StatusOr<std::vector<kernels::Event>> make_events(int count) {
  std::vector<kernels::Event> events;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<kernels::Event> e = kernels::create_event();
    if (!e.ok()) return e.status();
    events.push_back(*std::move(e));
  }
  return events;
}

class CudaOutOfCoreGemm : public CudaOperation {
 public:
  CudaOutOfCoreGemm(const CudaOperationContext& context, const GemmJob& job,
                    const GemmChooser& choose, std::span<std::byte> out)
      : CudaOperation(context),
        job_(job),
        choose_(choose),
        out_(out),
        read_c_(job.c.has_value() && job.beta != 0.0) {}

  // The device (the one holding device-resident operands, else the least loaded), the plan for
  // what its budget leaves free, and, for a kept result too large for the device, its host memory.
  absl::StatusOr<DeviceScheduler*> pick() {
    const Operand* operands[] = {&job_.a, &job_.b, job_.c ? &*job_.c : nullptr};
    absl::StatusOr<DeviceScheduler*> scheduler = pick_device(operands, job_.device_out.get());
    if (!scheduler.ok()) return scheduler;
    if (job_.device_out != nullptr) {
      return absl::FailedPreconditionError(
          "output_shm: a product computed out of core (its operands or result are too large for "
          "the device together) writes its result to host memory, not to CUDA memory");
    }
    const std::int64_t budget = device_->pool->budget();
    result_in_host_ = job_.keep_result && context_.host_matrices != nullptr &&
                      context_.host_matrices->wants(job_.out_bytes(), budget);
    if (result_in_host_) {
      absl::StatusOr<std::shared_ptr<ResidentMatrix>> m =
          context_.host_matrices->create(job_.m(), job_.n(), job_.out_dtype, job_.out_layout);
      if (!m.ok()) return m.status();
      host_result_ = *std::move(m);
    }
    // Planned with the memory the device's resident matrices leave, less the result when it
    // stays on the device.
    const PoolStats pool = device_->pool->stats();
    std::int64_t free_bytes = pool.request_bytes();
    if (job_.keep_result && !result_in_host_) {
      free_bytes -= static_cast<std::int64_t>(MemoryPool::size_class(job_.out_bytes()));
      if (free_bytes <= 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            device_->label, ": the kept result takes ", job_.out_bytes(),
            " bytes of device memory, more than the budget leaves (", pool.budget_bytes,
            " bytes, --memory_budget_bytes, of which resident matrices hold ",
            pool.long_lived_bytes,
            "; --max_host_matrix_bytes lets a result this large stay in "
            "host memory)"));
      }
    }
    problem_ = gemm_problem(job_, job_.a.dtype, operand_bytes(job_.a), operand_bytes(job_.b),
                            /*c=*/nullptr);
    absl::StatusOr<OutOfCorePlan> plan =
        plan_out_of_core(problem_, free_bytes, context_.out_of_core_tile);
    if (!plan.ok()) return plan.status();
    plan_ = *std::move(plan);
    return scheduler;
  }

  void plan_memory(BlockPlan& plan) {
    a_slots_ = plan.add(static_cast<std::size_t>(plan_.a_slots) * plan_.a_slot_bytes);
    b_slots_ = plan.add(static_cast<std::size_t>(plan_.b_slots) * plan_.b_slot_bytes);
    c_slots_ = plan.add(static_cast<std::size_t>(plan_.c_slots) * plan_.c_slot_bytes);
    device_result_ = plan.add_if(job_.keep_result && !result_in_host_, job_.out_bytes(),
                                 /*long_lived=*/true);
  }

  // Streams and events, each tile's problem on its slots, and its variant (chosen once per
  // tile shape: every slot is aligned alike).
  absl::Status choose(AdmittedMemory& memory) {
    if (absl::Status s = bind_slot(memory); !s.ok()) return s;
    a_base_ = static_cast<std::byte*>(memory.data(a_slots_));
    b_base_ = static_cast<std::byte*>(memory.data(b_slots_));
    c_base_ = static_cast<std::byte*>(memory.data(c_slots_));
    result_ = result_in_host_  ? host_result_->block.data()
              : device_result_ ? memory.data(*device_result_)
                               : static_cast<void*>(out_.data());
    for (kernels::Stream* s : {&copy_in_, &copy_out_}) {
      absl::StatusOr<kernels::Stream> created = kernels::create_stream();
      if (!created.ok()) return created.status();
      *s = *std::move(created);
    }
    for (auto [events, count] :
         {std::pair{&a_ready_, plan_.a_slots}, std::pair{&a_free_, plan_.a_slots},
          std::pair{&b_ready_, plan_.b_slots}, std::pair{&b_free_, plan_.b_slots},
          std::pair{&c_in_, plan_.c_slots}, std::pair{&c_done_, plan_.c_slots},
          std::pair{&c_free_, plan_.c_slots}, std::pair{&ends_, 2}}) {
      absl::StatusOr<std::vector<kernels::Event>> made = make_events(count);
      if (!made.ok()) return made.status();
      *events = *std::move(made);
    }
    std::map<std::pair<std::int64_t, std::int64_t>, const kernels::GemmVariant*> by_shape;
    for (const OutOfCoreStep& s : plan_.steps) {
      tiles_.push_back(
          packed(problem_, s.block, a_slot(s.a_slot), b_slot(s.b_slot), c_slot(s.c_slot)));
      tiles_.back().beta = read_c_ ? problem_.beta : 0.0;
      auto [at, added] = by_shape.try_emplace({s.block.rows, s.block.cols}, nullptr);
      if (added) {
        absl::StatusOr<const kernels::GemmVariant*> v = choose_(tiles_.back());
        if (!v.ok()) return v.status();
        at->second = *v;
      }
      variants_.push_back(at->second);
    }
    return absl::OkStatus();
  }

  absl::Status stage_in() { return absl::OkStatus(); }  // the pieces move within the launch

  absl::Status launch(Outcome& outcome) {
    return launch_device_work(/*graph_key=*/nullptr, [this] { return enqueue(); }, outcome);
  }

  // Every tile's result is where it belongs once the kernel-end event has passed.
  absl::Status stage_out(Outcome& outcome) {
    outcome.times.device_to_host_us = 0.0;
    return finish();
  }

  void record(Outcome& outcome) {
    record_device_times(/*copied_in=*/false, outcome);
    outcome.marks.add("gpu_kernel(events)", outcome.times.kernel_us);
    outcome.variant = std::string(variants_.front()->name) + "+out_of_core";
    outcome.device = device_->display_name;
    outcome.work = kernels::gemm_flops(problem_);
  }

  // After a failed step: the copy streams may still be moving bytes into or out of the slots.
  void abandon() {
    if (started_) {
      cudaStreamSynchronize(copy_in_.get());
      cudaStreamSynchronize(copy_out_.get());
    }
    CudaOperation::abandon();
  }

  void keep(AdmittedMemory& memory, Outcome& outcome) {
    if (!job_.keep_result) return;
    if (result_in_host_) {
      host_result_->owner = job_.owner;
      outcome.result = std::move(host_result_);
      return;
    }
    outcome.result = make_resident(memory.take(*device_result_), job_.m(), job_.n(), job_.out_dtype,
                                   job_.out_layout, job_.owner, device_->index, device_->label);
  }

 private:
  std::byte* a_slot(int i) const {
    return a_base_ + static_cast<std::size_t>(i) * plan_.a_slot_bytes;
  }
  std::byte* b_slot(int i) const {
    return b_base_ + static_cast<std::size_t>(i) * plan_.b_slot_bytes;
  }
  std::byte* c_slot(int i) const {
    return c_base_ + static_cast<std::size_t>(i) * plan_.c_slot_bytes;
  }

  // The pipeline, behind the kernel-begin event on the slot's stream; the slot's stream waits
  // for the last copy out before the kernel-end event.
  absl::Status enqueue() {
    started_ = true;
    const cudaStream_t in = copy_in_.get();
    const cudaStream_t out = copy_out_.get();
    const cudaEvent_t begun = ends_[0].get();
    const cudaEvent_t done = ends_[1].get();
    if (absl::Status s = record_on(begun, stream_); !s.ok()) return s;
    for (cudaStream_t s : {in, out}) {
      if (absl::Status st = wait_on(s, begun); !st.ok()) return st;
    }
    const auto* a = static_cast<const std::byte*>(problem_.a);
    const auto* b = static_cast<const std::byte*>(problem_.b);
    const auto* c_in = read_c_ ? static_cast<const std::byte*>(operand_bytes(*job_.c)) : nullptr;
    auto* result = static_cast<std::byte*>(result_);
    const kernels::ExecContext context = slot_->resources.context();
    for (std::size_t t = 0; t < plan_.steps.size(); ++t) {
      const OutOfCoreStep& step = plan_.steps[t];
      const auto as = static_cast<std::size_t>(step.a_slot);
      const auto bs = static_cast<std::size_t>(step.b_slot);
      const auto cs = static_cast<std::size_t>(step.c_slot);
      if (step.load_a) {
        const CBlock& piece = plan_.a_pieces[static_cast<std::size_t>(step.a_piece)];
        const StridedBytes from = a_rows(problem_, piece.row0, piece.rows);
        if (absl::Status s = load(a_slot(step.a_slot), a, from, a_free_[as].get(),
                                  a_ready_[as].get(), "copy A' rows in");
            !s.ok()) {
          return s;
        }
      }
      if (step.load_b) {
        const CBlock& block = plan_.b_blocks[static_cast<std::size_t>(step.b_block)];
        const StridedBytes from = b_cols(problem_, block.col0, block.cols);
        if (absl::Status s = load(b_slot(step.b_slot), b, from, b_free_[bs].get(),
                                  b_ready_[bs].get(), "copy B' columns in");
            !s.ok()) {
          return s;
        }
      }
      const StridedBytes c_at = c_block(problem_, step.block);
      if (read_c_) {
        if (absl::Status s = load(c_slot(step.c_slot), c_in, c_at, c_free_[cs].get(),
                                  c_in_[cs].get(), "copy C's tile in");
            !s.ok()) {
          return s;
        }
      }
      for (cudaEvent_t e : {a_ready_[as].get(), b_ready_[bs].get(),
                            read_c_ ? c_in_[cs].get() : c_free_[cs].get()}) {
        if (absl::Status s = wait_on(stream_, e); !s.ok()) return s;
      }
      if (absl::Status s = variants_[t]->launch(tiles_[t], context); !s.ok()) return s;
      for (cudaEvent_t e : {a_free_[as].get(), b_free_[bs].get()}) {
        if (absl::Status s = record_on(e, stream_); !s.ok()) return s;
      }
      if (absl::Status s = record_then_wait(c_done_[cs].get(), stream_, out); !s.ok()) return s;
      if (absl::Status s =
              copy_unpacked(result, c_slot(step.c_slot), c_at, out, "copy a tile's result out");
          !s.ok()) {
        return s;
      }
      if (absl::Status s = record_on(c_free_[cs].get(), out); !s.ok()) return s;
    }
    if (absl::Status s = record_on(done, out); !s.ok()) return s;
    return wait_on(stream_, done);
  }

  // Copies the strided block `from` of the matrix at `source` packed into a slot on the copy-in
  // stream, after the slot's last reader (`freed`); `ready` marks it there.
  absl::Status load(std::byte* slot, const std::byte* source, const StridedBytes& from,
                    cudaEvent_t freed, cudaEvent_t ready, const char* what) {
    const cudaStream_t in = copy_in_.get();
    if (absl::Status s = wait_on(in, freed); !s.ok()) return s;
    if (absl::Status s = copy_packed(slot, source, from, in, what); !s.ok()) return s;
    return record_on(ready, in);
  }

  const GemmJob& job_;
  const GemmChooser& choose_;
  const std::span<std::byte> out_;
  const bool read_c_;

  kernels::GemmProblem problem_;  // the whole product, on the operands where they lie
  OutOfCorePlan plan_;
  bool result_in_host_ = false;
  std::shared_ptr<ResidentMatrix> host_result_;

  BlockId a_slots_;
  BlockId b_slots_;
  BlockId c_slots_;
  std::optional<BlockId> device_result_;
  std::byte* a_base_ = nullptr;
  std::byte* b_base_ = nullptr;
  std::byte* c_base_ = nullptr;
  void* result_ = nullptr;

  kernels::Stream copy_in_;
  kernels::Stream copy_out_;
  std::vector<kernels::Event> a_ready_, a_free_, b_ready_, b_free_, c_in_, c_done_, c_free_;
  std::vector<kernels::Event> ends_;  // the pipeline's start and its last copy out
  std::vector<kernels::GemmProblem> tiles_;
  std::vector<const kernels::GemmVariant*> variants_;
  bool started_ = false;
};

}  // namespace

absl::Status run_cuda_out_of_core_gemm(const CudaOperationContext& context, const GemmJob& job,
                                       const GemmChooser& choose, std::span<std::byte> out,
                                       const Waiter& waiter, Outcome& outcome) {
  CudaOutOfCoreGemm op(context, job, choose, out);
  return execute(op, waiter, outcome);
}

}  // namespace matserve::server
