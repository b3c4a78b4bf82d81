// A batch of GEMMs of one shape on a CUDA device, in one launch, through the execution plan: each
// operand's inline matrices stacked in one block (consecutive host matrices going to consecutive
// places merge into one copy), the results in one block or, kept resident, one block each; a
// strided batch when every operand's matrices are evenly spaced, else pointer arrays copied to
// the device with the operands.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/precision.h"
#include "server/runtime/batch_placement.h"
#include "server/runtime/cuda_operation.h"
#include "server/runtime/problem_builder.h"
#include "server/runtime/resident_store.h"

namespace matserve::server {
namespace {

using kernels::cuda_status;

std::size_t inline_bytes(const std::vector<Operand>& list) {
  std::size_t n = 0;
  for (const Operand& o : list) n += o.is_resident() ? 0 : o.bytes();
  return n;
}

// More than one matrix, resident, in separate blocks: not evenly spaced in general (the
// products of one stacked resident matrix are).
bool resident_list(const std::vector<Operand>& list) {
  return list.size() > 1 && list[0].is_resident() && list[0].resident != list[1].resident;
}

class CudaGemmBatch : public CudaOperation {
 public:
  CudaGemmBatch(const CudaOperationContext& context, const GemmBatchJob& job,
                const GemmChooser& choose)
      : CudaOperation(context),
        job_(job),
        shape_(job.shape),
        choose_(choose),
        operand_(kernels::kernel_operand_dtype(shape_.a.dtype, shape_.precision)),
        convert_(operand_ != shape_.a.dtype),
        count_(static_cast<std::size_t>(job.count)),
        out_bytes_(shape_.out_bytes()),
        na_(static_cast<std::size_t>(shape_.a.rows * shape_.a.cols)),
        nb_(static_cast<std::size_t>(shape_.b.rows * shape_.b.cols)),
        op_size_(kernels::dtype_size(operand_)) {}

  absl::StatusOr<DeviceScheduler*> pick() {
    std::vector<const Operand*> operands;
    for (const std::vector<Operand>* list : {&job_.a, &job_.b, &job_.c}) {
      for (const Operand& o : *list) operands.push_back(&o);
    }
    return pick_device(operands, nullptr);
  }

  // Each operand's inline matrices stacked in order, the results (one block for the batch, or one
  // resident block per product), the converted operands, and room for pointer arrays where the
  // matrices are not evenly spaced: separate result blocks, or resident matrices (inline stacks,
  // converted stacks and one result block always are).
  void plan_memory(BlockPlan& plan) {
    const auto add = [&plan](std::size_t bytes, bool long_lived = false) {
      return plan.add(std::max<std::size_t>(bytes, 1), long_lived);
    };
    inline_a_ = add(inline_bytes(job_.a));
    inline_b_ = add(inline_bytes(job_.b));
    if (shape_.keep_result) {
      for (std::size_t i = 0; i < job_.kept_blocks(); ++i) {
        kept_.push_back(add(job_.kept_block_bytes(), true));
      }
    } else {
      results_ = add(count_ * out_bytes_);
    }
    if (convert_) {
      converted_a_ = add(job_.a.size() * na_ * op_size_);
      converted_b_ = add(job_.b.size() * nb_ * op_size_);
    }
    const bool separate_results = shape_.keep_result && job_.kept_blocks() > 1;
    const bool need_arrays =
        count_ > 1 && (separate_results || resident_list(job_.a) || resident_list(job_.b));
    if (need_arrays) arrays_block_ = add(3 * count_ * sizeof(void*));
  }

  absl::Status choose(AdmittedMemory& memory) {
    if (absl::Status s = bind(memory); !s.ok()) return s;
    ask_fp8_scales(problem_);
    absl::StatusOr<const kernels::GemmVariant*> v = choose_(problem_);
    if (!v.ok()) return v.status();
    variant_ = *v;
    return absl::OkStatus();
  }

  // The copies in, in one list: each operand's inline matrices to their places in its stack, C
  // where beta reads it (resident C copied on the device), the pointer arrays if any.
  absl::Status stage_in() {
    std::vector<StagedCopy> copies;
    std::vector<std::pair<void*, const void*>> resident_c;  // device-to-device copies of C
    stage_inline(job_.a, a_where_, copies);
    stage_inline(job_.b, b_where_, copies);
    for (std::size_t i = 0; i < count_; ++i) {
      const Operand* c0 = job_.c_of(static_cast<std::int64_t>(i));
      if (c0 == nullptr || shape_.beta == 0.0) continue;
      if (c0->is_resident()) {
        resident_c.emplace_back(ptrs_.c[i], operand_bytes(*c0));
      } else {
        stage(copies, ptrs_.c[i], c0->data.data(), out_bytes_);
      }
    }
    if (arrays_at_ != nullptr) {
      stage(copies, arrays_at_, arrays_.host.data(), arrays_.host.size() * sizeof(void*));
    }
    cudaEventRecord(events().copy_in_begin.get(), stream_);
    for (const auto& [dst, src] : resident_c) {
      if (absl::Status s = cuda_status(
              cudaMemcpyAsync(dst, src, out_bytes_, cudaMemcpyDeviceToDevice, stream_), "copy C");
          !s.ok()) {
        return s;
      }
    }
    if (!copies.empty()) {
      if (absl::Status s = slot_->staging.to_device(copies, stream_, copier()); !s.ok()) return s;
    }
    cudaEventRecord(events().copy_in_end.get(), stream_);
    return absl::OkStatus();
  }

  // A batch that repeats (the same shape, places and pointer-array block) is replayed as a
  // graph, as a single GEMM is; one that does not costs a direct launch (graphs are captured on
  // a key's second sighting). Batches whose operands are converted on the device first launch
  // directly (their conversions read each product's own source).
  absl::Status launch(Outcome& outcome) {
    const auto work = [this]() -> absl::Status {
      if (convert_) {
        if (absl::Status s = convert_all(job_.a, a_where_, ptrs_.a, na_, "convert A"); !s.ok()) {
          return s;
        }
        if (absl::Status s = convert_all(job_.b, b_where_, ptrs_.b, nb_, "convert B"); !s.ok()) {
          return s;
        }
      }
      return variant_->launch(problem_, slot_->resources.context());
    };
    if (convert_ || !variant_->can_capture(problem_)) {
      return launch_device_work(/*graph_key=*/nullptr, work, outcome);
    }
    kernels::LaunchKey key;
    key.add(variant_->name).add(problem_);
    return launch_device_work(&key, work, outcome);
  }

  absl::Status stage_out(Outcome& outcome) {
    const absl::Time start = absl::Now();
    if (!shape_.keep_result) {
      if (job_.outs.size() == 1) {  // the whole batch to one place
        if (absl::Status s = slot_->staging.to_host(job_.outs[0].data(), ptrs_.c[0],
                                                    count_ * out_bytes_, stream_, copier());
            !s.ok()) {
          return s;
        }
      } else {
        for (std::size_t i = 0; i < count_; ++i) {
          if (absl::Status s = slot_->staging.to_host(job_.outs[i].data(), ptrs_.c[i], out_bytes_,
                                                      stream_, copier());
              !s.ok()) {
            return s;
          }
        }
      }
    }
    if (absl::Status s = finish(); !s.ok()) return s;
    outcome.times.device_to_host_us = shape_.keep_result ? 0.0 : micros_since(start);
    return absl::OkStatus();
  }

  void record(Outcome& outcome) {
    record_device_times(/*copied_in=*/true, outcome);
    outcome.variant = std::string(variant_->name);
    outcome.device = device_->display_name;
    outcome.work = kernels::gemm_flops(problem_);
    read_fp8_scales(problem_, outcome);
  }

  void keep(AdmittedMemory& memory, Outcome& outcome) {
    const auto [rows, cols] = job_.kept_dims();
    for (BlockId id : kept_) {
      outcome.results.push_back(make_resident(memory.take(id), rows, cols, shape_.out_dtype,
                                              shape_.out_layout, shape_.owner, device_->index,
                                              device_->label));
    }
  }

 private:
  // Takes the stream slot and settles the batch's placement, the pointers the kernel will see:
  // where each matrix is on the device, the results, strides where every operand is evenly
  // spaced, else pointer arrays (their host copy here, staged in with the operands).
  absl::Status bind(AdmittedMemory& memory) {
    if (absl::Status s = bind_slot(memory); !s.ok()) return s;
    a_where_ = place(job_.a, memory.data(inline_a_));
    b_where_ = place(job_.b, memory.data(inline_b_));
    // Converted, the kernel reads the converted stacks, one matrix after another.
    ptrs_.a = convert_ ? stacked(memory.data(*converted_a_), job_.a.size(), na_) : a_where_;
    ptrs_.b = convert_ ? stacked(memory.data(*converted_b_), job_.b.size(), nb_) : b_where_;
    for (std::size_t i = 0; i < count_; ++i) {
      if (shape_.keep_result) {
        const auto [block, offset] = job_.kept_place(static_cast<std::int64_t>(i));
        ptrs_.c.push_back(static_cast<std::byte*>(memory.data(kept_[block])) + offset);
      } else {  // one block for the whole batch, copied out after
        ptrs_.c.push_back(static_cast<std::byte*>(memory.data(*results_)) + i * out_bytes_);
      }
    }
    const std::optional<kernels::GemmBatch> strided =
        strided_batch(ptrs_, op_size_, kernels::dtype_size(shape_.out_dtype));
    kernels::GemmBatch batch;
    if (strided.has_value()) {
      batch = *strided;
    } else {
      if (!arrays_block_) return absl::InternalError("batch: matrices not evenly spaced");
      arrays_ = pointer_arrays(ptrs_);
      arrays_at_ = memory.data(*arrays_block_);
      batch = arrays_.placed_at(arrays_at_);
    }
    problem_ = gemm_problem(shape_, operand_, ptrs_.a[0], ptrs_.b[0], ptrs_.c[0], batch);
    return absl::OkStatus();
  }

  // A host -> device copy of the inline bytes; one that continues the previous copy on both sides
  // merges into it.
  static void stage(std::vector<StagedCopy>& copies, void* dst, const void* src, std::size_t n) {
    if (!copies.empty()) {
      StagedCopy& last = copies.back();
      if (static_cast<const std::byte*>(last.src) + last.bytes == src &&
          static_cast<std::byte*>(last.dst) + last.bytes == dst) {
        last.bytes += n;
        return;
      }
    }
    copies.push_back({dst, src, n});
  }

  // The copies that put `list`'s inline matrices where `where` places them.
  static void stage_inline(const std::vector<Operand>& list, const std::vector<const void*>& where,
                           std::vector<StagedCopy>& copies) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (list[i].is_resident()) continue;
      stage(copies, const_cast<void*>(where[i]), list[i].data.data(), list[i].bytes());
    }
  }

  // Where each matrix of `list` is on the device: resident ones where they live, inline ones
  // stacked from `stack` on.
  static std::vector<const void*> place(const std::vector<Operand>& list, void* stack) {
    std::vector<const void*> where;
    auto* next = static_cast<std::byte*>(stack);
    for (const Operand& o : list) {
      if (o.is_resident()) {
        where.push_back(operand_bytes(o));
      } else {
        where.push_back(next);
        next += o.bytes();
      }
    }
    return where;
  }

  // `n` matrices of `elems` kernel operands each, one after another from `base`.
  std::vector<const void*> stacked(void* base, std::size_t n, std::size_t elems) const {
    std::vector<const void*> out;
    for (std::size_t i = 0; i < n; ++i) {
      out.push_back(static_cast<std::byte*>(base) + i * elems * op_size_);
    }
    return out;
  }

  absl::Status convert_all(const std::vector<Operand>& list, const std::vector<const void*>& from,
                           const std::vector<const void*>& to, std::size_t elems,
                           const char* what) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (absl::Status s = cuda_status(
              kernels::launch_convert(from[i], list[i].dtype, const_cast<void*>(to[i]), operand_,
                                      static_cast<std::int64_t>(elems), stream_),
              what);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  const GemmBatchJob& job_;
  const GemmShape& shape_;
  const GemmChooser& choose_;
  const kernels::DType operand_;
  const bool convert_;
  const std::size_t count_;
  const std::size_t out_bytes_;
  const std::size_t na_;
  const std::size_t nb_;
  const std::size_t op_size_;

  BlockId inline_a_;
  BlockId inline_b_;
  std::optional<BlockId> results_;  // every product's result, one after another
  std::vector<BlockId> kept_;       // or one resident block per product
  std::optional<BlockId> converted_a_;
  std::optional<BlockId> converted_b_;
  std::optional<BlockId> arrays_block_;

  std::vector<const void*> a_where_;  // A and B on the device, as sent
  std::vector<const void*> b_where_;
  ProductPointers ptrs_;       // as the kernel reads them
  PointerArrays arrays_;       // host copy of the pointer arrays, read by the staged copy
  void* arrays_at_ = nullptr;  // where they go on the device (null: a strided batch)
  kernels::GemmProblem problem_;
  const kernels::GemmVariant* variant_ = nullptr;
};

}  // namespace

absl::Status run_cuda_gemm_batch(const CudaOperationContext& context, const GemmBatchJob& job,
                                 const GemmChooser& choose, const Waiter& waiter,
                                 Outcome& outcome) {
  CudaGemmBatch op(context, job, choose);
  return execute(op, waiter, outcome);
}

}  // namespace matserve::server
