// One GEMM on a CUDA device through the execution plan: inline operands staged in together (B's
// host copy overlapping A's DMA), fp32 data converted on the device when the precision computes
// on narrower operands, the kernel replayed as a CUDA graph once its launch repeats, the result
// staged out (or copied into the caller's CUDA memory, or kept resident). A product large enough
// is spread over the server's other free devices (cuda_split_gemm.h): the home device computes its
// band, the helpers theirs, within the same kernel events. fp8 products on resident e4m3
// operands that are not K-major read the matrix's kept transposed copy, made by the first such
// product (ResidentMatrix::transposed), instead of repacking the operand every time.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cublaslt/fp8_quantize.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/precision.h"
#include "server/runtime/cuda_operation.h"
#include "server/runtime/problem_builder.h"
#include "server/runtime/resident_store.h"
#include "server/runtime/split_plan.h"

namespace matserve::server {
namespace {

using kernels::cuda_status;

class CudaGemm : public CudaOperation {
 public:
  CudaGemm(const CudaOperationContext& context, const GemmJob& job, const GemmChooser& choose,
           std::span<std::byte> out)
      : CudaOperation(context),
        job_(job),
        choose_(choose),
        out_(out),
        operand_(kernels::kernel_operand_dtype(job.a.dtype, job.precision)),
        convert_(operand_ != job.a.dtype),
        copy_c_(job.c.has_value() && job.beta != 0.0),
        na_(static_cast<std::size_t>(job.a.rows * job.a.cols)),
        nb_(static_cast<std::size_t>(job.b.rows * job.b.cols)) {}

  absl::StatusOr<DeviceScheduler*> pick() {
    const Operand* operands[] = {&job_.a, &job_.b, job_.c ? &*job_.c : nullptr};
    return pick_device(operands, job_.device_out.get());
  }

  void plan_memory(BlockPlan& plan) {
    inline_a_ = plan.add_if(!job_.a.is_resident(), job_.a.bytes());
    inline_b_ = plan.add_if(!job_.b.is_resident(), job_.b.bytes());
    result_ = plan.add(job_.out_bytes(), job_.keep_result);
    converted_a_ = plan.add_if(convert_, na_ * kernels::dtype_size(operand_));
    converted_b_ = plan.add_if(convert_, nb_ * kernels::dtype_size(operand_));
    plan_transposed_copies(plan);
  }

  absl::Status choose(AdmittedMemory& memory) {
    if (absl::Status s = bind(memory); !s.ok()) return s;
    if (absl::Status s = maybe_split(); !s.ok()) return s;
    if (!split_) ask_fp8_scales(problem_);  // split bands quantize each with their own
    absl::StatusOr<const kernels::GemmVariant*> v =
        choose_(split_ ? split_->home_problem() : problem_);
    if (!v.ok()) return v.status();
    variant_ = *v;
    return absl::OkStatus();
  }

  // Operands already on the device (resident, no C to copy) skip the copy-in events: one CUDA
  // call less on the path that matters most for latency.
  absl::Status stage_in() {
    copies_in_ = inline_a_ || inline_b_ || copy_c_;
    if (!copies_in_) return absl::OkStatus();
    cudaEventRecord(events().copy_in_begin.get(), stream_);
    // Every inline operand in one staged transfer, so B's host copy overlaps A's DMA.
    StagedCopy inline_copies[3];
    std::size_t n_inline = 0;
    if (inline_a_) inline_copies[n_inline++] = {a_, job_.a.data.data(), job_.a.bytes()};
    if (inline_b_) inline_copies[n_inline++] = {b_, job_.b.data.data(), job_.b.bytes()};
    if (copy_c_) {
      if (job_.c->is_resident()) {
        if (absl::Status s =
                cuda_status(cudaMemcpyAsync(c_, job_.c->resident->block.data(), job_.out_bytes(),
                                            cudaMemcpyDeviceToDevice, stream_),
                            "copy C");
            !s.ok()) {
          return s;
        }
      } else {
        inline_copies[n_inline++] = {c_, job_.c->data.data(), job_.out_bytes()};
      }
    }
    if (n_inline > 0) {
      if (absl::Status s = slot_->staging.to_device({inline_copies, n_inline}, stream_, copier());
          !s.ok()) {
        return s;
      }
    }
    cudaEventRecord(events().copy_in_end.get(), stream_);
    return absl::OkStatus();
  }

  // The kernel events bracket the device work (conversions, the kernels); the host's time to
  // enqueue it is the launch stage. Replayed as a graph, events included, the device runs the
  // work without waiting for the host in between; launched directly, it may wait within that
  // interval (docs/api.md).
  absl::Status launch(Outcome& outcome) {
    const auto work = [this]() -> absl::Status {
      if (absl::Status s = make_transposed_copies(); !s.ok()) return s;
      if (convert_) {
        if (absl::Status s = convert(a_, job_.a.dtype, kernel_a_, na_, "convert A"); !s.ok()) {
          return s;
        }
        if (absl::Status s = convert(b_, job_.b.dtype, kernel_b_, nb_, "convert B"); !s.ok()) {
          return s;
        }
      }
      if (split_) {
        // The helpers start from the operands as they are now; the home band runs meanwhile.
        if (absl::Status s = split_->start_helpers(stream_); !s.ok()) return s;
        if (absl::Status s = variant_->launch(split_->home_problem(), slot_->resources.context());
            !s.ok()) {
          return s;
        }
        return split_->join_helpers(stream_);
      }
      return variant_->launch(problem_, slot_->resources.context());
    };
    // Work on several devices is enqueued directly: a graph captures one device's stream. So is
    // a product that makes a transposed copy: later ones read the copy, with another graph.
    if (!variant_->can_capture(problem_) || split_ || makes_copies()) {
      return launch_device_work(/*graph_key=*/nullptr, work, outcome);
    }
    kernels::LaunchKey key;
    key.add(variant_->name).add(problem_).add(convert_);
    if (convert_) key.add(a_).add(b_).add(job_.a.dtype).add(job_.b.dtype).add(na_).add(nb_);
    return launch_device_work(&key, work, outcome);
  }

  absl::Status stage_out(Outcome& outcome) {
    return copy_result_out(c_, job_.out_bytes(), job_.device_out.get(), out_, !job_.keep_result,
                           outcome);
  }

  void record(Outcome& outcome) {
    record_device_times(copies_in_, outcome);
    outcome.marks.add("gpu_h2d(events)", outcome.times.host_to_device_us);
    outcome.marks.add("gpu_kernel(events)", outcome.times.kernel_us);
    outcome.variant = std::string(variant_->name);
    outcome.device = split_ ? absl::StrCat(split_->labels(), " ", device_->description.name)
                            : device_->display_name;
    outcome.work = kernels::gemm_flops(problem_);
    read_fp8_scales(problem_, outcome);
  }

  // After a failed step: the helpers may still be copying into this operation's C.
  void abandon() {
    if (split_) split_->wait();
    CudaOperation::abandon();
  }

  void keep(AdmittedMemory& memory, Outcome& outcome) {
    for (TransposedCopy* copy : {&copy_a_, &copy_b_}) {
      if (copy->made_data != nullptr) copy->matrix->keep_transposed(memory.take(*copy->made));
    }
    if (!job_.keep_result) return;
    outcome.result = make_resident(memory.take(result_), job_.m(), job_.n(), job_.out_dtype,
                                   job_.out_layout, job_.owner, device_->index, device_->label);
  }

 private:
  // Takes the stream slot; where the operands and the result are on the device, as sent and as
  // the kernel reads them.
  absl::Status bind(AdmittedMemory& memory) {
    if (absl::Status s = bind_slot(memory); !s.ok()) return s;
    a_ = inline_a_ ? memory.data(*inline_a_) : job_.a.resident->block.data();
    b_ = inline_b_ ? memory.data(*inline_b_) : job_.b.resident->block.data();
    c_ = memory.data(result_);
    kernel_a_ = converted_a_ ? memory.data(*converted_a_) : a_;
    kernel_b_ = converted_b_ ? memory.data(*converted_b_) : b_;
    problem_ = gemm_problem(job_, operand_, kernel_a_, kernel_b_, c_);
    use_transposed_copy(copy_a_, memory, problem_.a, problem_.lda, problem_.a_trans, false);
    use_transposed_copy(copy_b_, memory, problem_.b, problem_.ldb, problem_.b_trans, true);
    return absl::OkStatus();
  }

  // A resident e4m3 matrix that an fp8 product reads as a canonical operand which is not
  // K-major (A' with a_trans, B' without b_trans; the whole matrix, dense, every side a multiple
  // of 16): its transposed copy, kept or to be made in an if-room block (without room, the fp8
  // kernel repacks the operand itself, as before).
  struct TransposedCopy {
    ResidentMatrix* matrix = nullptr;
    std::optional<BlockId> made;   // the block this product makes the copy in
    void* made_data = nullptr;     // set once the product reads the copy it makes
    const void* source = nullptr;  // the operand as stored (the copy's source)
    std::int64_t rows = 0;         // the operand's m (A) or n (B); its k is the problem's
    std::int64_t ld = 0;           // the source's leading dimension
  };

  void plan_transposed_copies(BlockPlan& plan) {
    if (job_.precision != kernels::Precision::kF8 || operand_ != kernels::DType::kF8E4M3) return;
    const auto whole = [](const Operand& o) -> const void* {
      return o.is_resident() && !in_host_memory(o) && o.offset == 0 ? o.resident->block.data()
                                                                    : nullptr;
    };
    const void* ra = whole(job_.a);
    const void* rb = whole(job_.b);
    if (ra == nullptr && rb == nullptr) return;
    const kernels::GemmProblem probe = gemm_problem(job_, operand_, ra, rb, nullptr);
    if (probe.batch.count > 1 || probe.m % 16 != 0 || probe.n % 16 != 0 || probe.k % 16 != 0) {
      return;
    }
    const auto matrix_of = [&](const void* p) -> ResidentMatrix* {
      if (p == nullptr) return nullptr;
      return p == ra ? job_.a.resident.get() : job_.b.resident.get();
    };
    if (probe.a_trans && probe.lda == probe.m) plan_copy(copy_a_, matrix_of(probe.a), plan);
    if (!probe.b_trans && probe.ldb == probe.n) plan_copy(copy_b_, matrix_of(probe.b), plan);
  }

  void plan_copy(TransposedCopy& copy, ResidentMatrix* matrix, BlockPlan& plan) {
    if (matrix == nullptr) return;
    copy.matrix = matrix;
    if (matrix->transposed_data() != nullptr) return;
    if (&copy == &copy_b_ && copy_a_.matrix == matrix) return;  // A x A^T: A's copy serves both
    // The copy counts against its owner's quota: none when the quota has no room for it.
    if (!copy_room_) {
      copy_room_ = job_.copy_room ? job_.copy_room() : std::numeric_limits<std::int64_t>::max();
    }
    const auto counted = static_cast<std::int64_t>(MemoryPool::size_class(matrix->bytes()));
    if (counted > *copy_room_) return;
    *copy_room_ -= counted;
    copy.made = plan.add_if_room(true, matrix->bytes(), /*long_lived=*/true);
  }

  // Points the problem's operand at its transposed copy (K-major) when there is one to read.
  void use_transposed_copy(TransposedCopy& copy, AdmittedMemory& memory, const void*& operand,
                           std::int64_t& ld, bool& trans, bool b) {
    if (copy.matrix == nullptr) return;
    const void* data = copy.matrix->transposed_data();
    if (data == nullptr && copy.made && memory.has(*copy.made)) {
      copy.made_data = memory.data(*copy.made);
      data = copy.made_data;
    }
    if (data == nullptr && b && copy_a_.matrix == copy.matrix) data = copy_a_.made_data;
    if (data == nullptr) {
      if (copy.made) memory.release(*copy.made);
      copy.made.reset();
      return;
    }
    copy.source = operand;
    copy.rows = b ? problem_.n : problem_.m;
    copy.ld = ld;
    operand = data;
    ld = problem_.k;
    trans = b;
  }

  bool makes_copies() const { return copy_a_.made_data != nullptr || copy_b_.made_data != nullptr; }

  // The copies this product makes, on its stream before the kernel (inside its kernel events).
  absl::Status make_transposed_copies() {
    for (const TransposedCopy* copy : {&copy_a_, &copy_b_}) {
      if (copy->made_data == nullptr) continue;
      kernels::Fp8QuantizeArgs pack;
      pack.src = copy->source;
      pack.src_type = kernels::DType::kF8E4M3;
      pack.rows = copy->rows;
      pack.cols = problem_.k;
      pack.ld = copy->ld;
      pack.k_major = false;  // the source holds the operand's transpose
      pack.dst = copy->made_data;
      pack.ld_dst = problem_.k;
      if (absl::Status s = cuda_status(kernels::launch_fp8_quantize(pack, stream_),
                                       "transposed copy of an fp8 operand");
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  // Whether this product is spread over devices (cuda_split_gemm.h): the flags and the request
  // allow it, it is one product large enough, and every other device is free to take a share now.
  absl::Status maybe_split() {
    const SplitSettings* settings = context_.split;
    if (settings == nullptr || !settings->enabled || job_.split == SplitChoice::kNever ||
        makes_copies()) {
      return absl::OkStatus();
    }
    if (problem_.batch.count != 1 || problem_.k < 1 || std::max(problem_.m, problem_.n) < 2) {
      return absl::OkStatus();
    }
    const double flops = 2.0 * static_cast<double>(problem_.m) * static_cast<double>(problem_.n) *
                         static_cast<double>(problem_.k);
    if (job_.split == SplitChoice::kDefault && flops < settings->min_flops) {
      return absl::OkStatus();
    }
    std::vector<CudaDevice*> helpers;
    for (CudaDevice* d : context_.devices) {
      if (d != device_ && d->healthy.load()) helpers.push_back(d);
    }
    if (helpers.empty()) return absl::OkStatus();
    const SplitPlan plan =
        plan_split(problem_.m, problem_.n, static_cast<int>(helpers.size()) + 1, settings->tile);
    absl::StatusOr<std::optional<GemmSplit>> split =
        GemmSplit::prepare(plan, problem_, *device_, helpers, choose_);
    if (!split.ok()) return split.status();
    if (split->has_value()) split_.emplace(std::move(**split));
    return absl::OkStatus();
  }

  absl::Status convert(const void* from, kernels::DType from_type, void* to, std::size_t elems,
                       const char* what) {
    return cuda_status(kernels::launch_convert(from, from_type, to, operand_,
                                               static_cast<std::int64_t>(elems), stream_),
                       what);
  }

  const GemmJob& job_;
  const GemmChooser& choose_;
  const std::span<std::byte> out_;
  const kernels::DType operand_;  // what the kernel reads
  const bool convert_;            // fp32 data converted to operand_ on the device first
  const bool copy_c_;             // C is read (beta != 0)
  const std::size_t na_;          // elements of A and B
  const std::size_t nb_;

  std::optional<BlockId> inline_a_;  // where inline operands land
  std::optional<BlockId> inline_b_;
  BlockId result_;
  std::optional<BlockId> converted_a_;
  std::optional<BlockId> converted_b_;

  void* a_ = nullptr;  // A and B on the device, as sent
  void* b_ = nullptr;
  void* c_ = nullptr;
  void* kernel_a_ = nullptr;  // A and B as the kernel reads them
  void* kernel_b_ = nullptr;
  kernels::GemmProblem problem_;
  const kernels::GemmVariant* variant_ = nullptr;
  bool copies_in_ = false;
  std::optional<GemmSplit> split_;  // set when other devices compute part of the product
  TransposedCopy copy_a_;           // the canonical A's and B's transposed copies (fp8)
  TransposedCopy copy_b_;
  std::optional<std::int64_t> copy_room_;  // quota left for its copies, once first needed
};

}  // namespace

absl::Status run_cuda_gemm(const CudaOperationContext& context, const GemmJob& job,
                           const GemmChooser& choose, std::span<std::byte> out,
                           const Waiter& waiter, Outcome& outcome) {
  CudaGemm op(context, job, choose, out);
  return execute(op, waiter, outcome);
}

}  // namespace matserve::server
